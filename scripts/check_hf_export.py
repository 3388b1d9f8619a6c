"""
check_hf_export.py - what transformers makes of a Hugging Face directory the trainer wrote
(train_gpt -hf 1: <-o>/hf_<step>/): it loads it with AutoModelForCausalLM and computes the
validation loss exactly as the trainer does, so the two can be compared. Run on the GPU machine
(torch and transformers).

The trainer's val loss at step s (the "val loss X (N tokens)" line, printed at the top of step s,
when s is a multiple of -v and at the last step) is computed from the same parameters that
hf_<s> holds: the first -m batches of the val shard, each B x T consecutive tokens (batch i
starts at token i B T; inputs tokens[0 .. B T), targets tokens[1 .. B T]), a partial last batch
padded with ignored targets, the loss the mean cross-entropy over every real target. This script
does the same in fp32 (eager attention) and prints it; the trainer computes in bf16, so expect
agreement to about 1e-3 relative, not bitwise. With --ids it also prints the logits of those ids
(the last position's first values and argmax).

    python3 scripts/check_hf_export.py OUT/hf_00000020 --val data/tiny_shakespeare_val.bin -b 4 -t 64 -m 20
        [--expect 5.123]   (the trainer's val loss: exit 1 if the relative difference is above --rtol)
    python3 scripts/check_hf_export.py OUT/hf_00000020 --ids 50256,464,3290
"""
import argparse
import struct
import sys

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM


def read_shard(path):
    """llm.c's token shard: int32 header[256] (magic, version, ntok), then uint16 (20240520) or uint32
    (20240801) tokens"""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        magic, ntok = header[0], header[2]
        if magic not in (20240520, 20240801):
            sys.exit(f"{path}: bad magic {magic}")
        dtype = torch.int16 if magic == 20240520 else torch.int32
        raw = f.read()
    t = torch.frombuffer(bytearray(raw), dtype=dtype)[:ntok].to(torch.int64)
    return t & 0xFFFF if magic == 20240520 else t & 0xFFFFFFFF


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--val", default=None, help="the val shard (the trainer's -j, one file)")
    ap.add_argument("-b", type=int, default=4)
    ap.add_argument("-t", type=int, default=1024)
    ap.add_argument("-m", type=int, default=20, help="val batches (the trainer's -m; -1: all)")
    ap.add_argument("--ids", default=None, help="comma-separated token ids")
    ap.add_argument("--expect", type=float, default=None, help="the trainer's val loss")
    ap.add_argument("--rtol", type=float, default=2e-3)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(args.dir, attn_implementation="eager")
    model = model.to(device=device, dtype=torch.float32).eval()
    n = sum(p.numel() for p in model.parameters())
    print(f"{args.dir}: {type(model).__name__}, {n} parameters, vocab {model.config.vocab_size}")
    rc = 0
    with torch.no_grad():
        if args.ids:
            ids = torch.tensor([[int(x) for x in args.ids.split(",")]], device=device)
            logits = model(input_ids=ids).logits[0, -1]
            print(f"logits of the last position: {logits[:8].tolist()} ... argmax {int(logits.argmax())}")
        if args.val:
            tokens = read_shard(args.val)
            bt = args.b * args.t
            batches = (tokens.numel() - 1 + bt - 1) // bt
            if args.m >= 0:
                batches = min(batches, args.m)
            loss_sum, count = 0.0, 0
            for i in range(batches):
                x = torch.zeros(bt, dtype=torch.int64)
                y = torch.full((bt,), -100, dtype=torch.int64)
                chunk = tokens[i * bt: i * bt + bt + 1]
                real = chunk.numel() - 1
                x[:real] = chunk[:real]
                y[:real] = chunk[1:]
                x, y = x.view(args.b, args.t).to(device), y.view(args.b, args.t).to(device)
                logits = model(input_ids=x).logits.float()
                loss_sum += F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=-100,
                                            reduction="sum").item()
                count += int((y != -100).sum())
            val = loss_sum / max(count, 1)
            print(f"val loss {val:.6f} ({count} tokens, {batches} batches of {args.b} x {args.t})")
            if args.expect is not None:
                rel = abs(val - args.expect) / abs(args.expect)
                ok = rel <= args.rtol
                print(f"{'ok' if ok else 'FAIL'}: the trainer's {args.expect:.6f}, relative difference {rel:.2e} "
                      f"(tolerance {args.rtol:g})")
                rc = 0 if ok else 1
    sys.exit(rc)


if __name__ == "__main__":
    main()
