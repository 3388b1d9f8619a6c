"""
flce: fused linear + cross-entropy (flce/flce.h), from Python.

    import flce
    loss = flce.linear_cross_entropy(hidden, lm_head.weight, target)      # like
    # F.cross_entropy(hidden @ lm_head.weight.T, target), without the (N, V) logits
    loss_fn = flce.FusedLinearCrossEntropyLoss(ignore_index=-100)         # Liger's call order:
    loss = loss_fn(lm_head.weight, hidden, target)                        # (weight, input, target)

The binding is ctypes over libflce.so (`make lib` builds build/libflce.so; $FLCE_LIBRARY
overrides where it is looked for: see flce._lib). `import flce` needs neither torch nor a GPU;
the torch names (linear_cross_entropy, FusedLinearCrossEntropyLoss, LinearCrossEntropyFunction,
check_errors, set_workspace_budget, set_hopper, set_autotune, hopper_default) import torch
when first used.
"""
from ._lib import (FlceError, FlceLibraryError, Status, Dtype, IndexType, Reduction, Config,
                   Tensors, load_library, library_path, version)

__version__ = "1.1.0"

_TORCH_NAMES = ("linear_cross_entropy", "FusedLinearCrossEntropyLoss", "LinearCrossEntropyFunction",
                "check_errors", "set_workspace_budget", "set_hopper", "set_autotune", "hopper_default")

__all__ = ["FlceError", "FlceLibraryError", "Status", "Dtype", "IndexType", "Reduction", "Config",
           "Tensors", "load_library", "library_path", "version"] + list(_TORCH_NAMES)


def __getattr__(name):
    if name in _TORCH_NAMES:
        from . import _torch
        return getattr(_torch, name)
    raise AttributeError("module 'flce' has no attribute %r" % name)


def __dir__():
    return sorted(list(globals()) + list(_TORCH_NAMES))
