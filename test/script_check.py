"""What test/'s Python suites of scripts/ share: a script loaded as a module, and the ok / FAIL
lines with the "N passed, M failed" line that closes a suite (the Makefile's sum_suites adds
those up)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(name):
    """scripts/<name>.py as a module, without running its main()."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Checks:
    """check(ok, msg) prints a check's line; summary() the suite's last line and its exit code."""

    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, ok, msg):
        if ok:
            self.passed += 1
            print("  ok   " + msg)
        else:
            self.failed += 1
            print("FAIL   " + msg)

    def summary(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
