#!/usr/bin/env python3
"""
check_tokens_tiktoken.py - checks the C GPT-2 encoder (data/bpe_encode.c) against
tiktoken, offline, and writes the token fixture the C test (test/test_bpe.c) reads.

  1. builds tiktoken's GPT-2 encoding from the repository's own data/gpt2/vocab.bpe and
     encoder.json (no download: TIKTOKEN_CACHE_DIR="" disables the cache);
  2. re-encodes the text like data/bpe_encode.c / llm.c's tinyshakespeare.py (split on
     "\\n\\n"; per section <|endoftext|> then encode_ordinary(section + "\\n\\n"), no "\\n\\n"
     after the last section; first --val-tokens tokens are val, the rest train) and compares
     token for token with the .bin shards, printing the first mismatch;
  3. compares every token of the decode tokenizer file with tiktoken's bytes for that id;
  4. writes test/fixtures/tokens_tiktoken.bin: short tricky strings with tiktoken's ids.
     With --fuzz N it also writes N random mixed-script strings to --fuzz-out (not
     committed; pass that file to build/test_bpe for a deeper check).

Token fixture format (little endian):
    int32 header[256]: [0] = 20261201 (magic), [1] = 1 (version), [2] = number of cases,
                       rest 0
    per case: uint32 nbytes, nbytes bytes of UTF-8 text,
              uint32 ntok, ntok x uint32 token ids (tiktoken encode_ordinary)
    nothing after the last case.

Needs: pip install tiktoken. Exit status 0 only when everything matches.
Usage (repository root): python scripts/check_tokens_tiktoken.py
"""
import argparse
import hashlib
import os
import random
import struct
import sys

os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read the local files directly, never cache/download

import tiktoken  # noqa: E402
from tiktoken.load import data_gym_to_mergeable_bpe_ranks  # noqa: E402

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = 50256
SHARD_MAGIC, SHARD_VERSION = 20240520, 1
TOKENIZER_MAGIC = 20240328
FIXTURE_MAGIC, FIXTURE_VERSION = 20261201, 1

# short strings that exercise every branch of the pre-tokenizer and BPE
FIXTURE_STRINGS = [
    "",
    "Hello world",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n",
    "I'm sure you're right; we've said they'll go, he'd stay, it's done, don't.",
    "I'M SURE YOU'RE RIGHT, DON'T 'tis 'Tis o'er ''s 'x '",
    "rock'n'roll ma'am y'all 's 't 're 've 'm 'll 'd",
    "123 4567 89012345 3.14159 1,000,000 -42 +7 0x1F 2nd 10th",
    "a  b   c    d     e",
    "trailing spaces   ",
    "   leading spaces",
    "line1\nline2\n\nline3\n\n\nline4\n",
    "\n\n\n",
    " \n \n  \n\t\tx\r\n\r\ny",
    "tabs\tand\t\tmore\t\t\t tabs",
    "Hello, world!!! What?! ... --- (parens) [brackets] {braces} @#$%^&*_+=~`|\\/<>",
    "café naïve — 日本語 😀",
    "Ünïcödé Ñandú façade coöperate résumé",
    "Привет, мир! Γειά σου Κόσμε. שלום עולם. مرحبا ١٢٣ ٤٥٦",
    "中文字符测试，句号。日本語のテキスト、カタカナ！한국어 텍스트",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧 🇺🇸 ❤️",
    "nbsp\u00a0here, ideographic\u3000space, thin\u2009space, nel\u0085x",
    "combining e\u0301 vs \u00e9, superscript x\u00b2, fraction \u00bd, roman \u216b",
    "<|endoftext|> is plain text here",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!",
    "                                                                ",
    "x" + " " * 20 + "y",
    "ends with newline\n",
    "ends with space ",
    "'",
    " ",
    "\t",
    "control\x01\x02\x1c\x1fchars\x7f",
]


def build_encoding(vocab_bpe, encoder_json):
    ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=vocab_bpe, encoder_json_file=encoder_json)
    return tiktoken.Encoding(
        name="gpt2_local",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": EOT},
    )


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 1024:
        sys.exit("FAIL: shard %s: truncated header (%d bytes)" % (path, len(data)))
    header = struct.unpack("<256i", data[:1024])
    if header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        sys.exit("FAIL: shard %s: bad magic/version %d %d" % (path, header[0], header[1]))
    ntok = header[2]
    if len(data) != 1024 + 2 * ntok:
        sys.exit("FAIL: shard %s: size %d != 1024 + 2 * %d" % (path, len(data), ntok))
    if any(header[3:]):
        sys.exit("FAIL: shard %s: header words 3..255 are not all zero" % path)
    return list(struct.unpack("<%dH" % ntok, data[1024:]))


def read_tokenizer(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256I", data[:1024])
    if header[0] != TOKENIZER_MAGIC or header[1] != 2:
        sys.exit("FAIL: tokenizer %s: bad magic/version %d %d" % (path, header[0], header[1]))
    vocab, eot = header[2], header[3]
    toks, pos = [], 1024
    for _ in range(vocab):
        n = data[pos]
        toks.append(data[pos + 1:pos + 1 + n])
        pos += 1 + n
    if pos != len(data):
        sys.exit("FAIL: tokenizer %s: %d bytes left after the last token" % (path, len(data) - pos))
    return vocab, eot, toks


def encode_like_llmc(enc, text):
    sections = text.split("\n\n")
    tokens = []
    for i, s in enumerate(sections):
        tokens.append(EOT)
        spad = s + "\n\n" if i != len(sections) - 1 else s
        tokens.extend(enc.encode_ordinary(spad))
    return tokens, len(sections)


def first_mismatch(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def write_fixture(path, enc, strings):
    out = bytearray(struct.pack("<256i", FIXTURE_MAGIC, FIXTURE_VERSION, len(strings), *([0] * 253)))
    ntok = 0
    for s in strings:
        b = s.encode("utf-8")
        ids = enc.encode_ordinary(s)
        assert enc.decode_bytes(ids) == b
        out += struct.pack("<I", len(b)) + b
        out += struct.pack("<I%dI" % len(ids), len(ids), *ids)
        ntok += len(ids)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(out)
    os.replace(tmp, path)
    print("wrote %s: %d strings, %d tokens, %d bytes" % (path, len(strings), ntok, len(out)))


def fuzz_strings(n, seed):
    rng = random.Random(seed)
    # pools: ASCII, Latin-1/Extended, combining marks, Greek/Cyrillic, CJK, digits of other
    # scripts, whitespace variants, emoji / astral, and anything at all (non-surrogate)
    pools = [
        [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t", "'", "'", " ", " ", "\n\n"],
        [chr(c) for c in range(0xA0, 0x250)],
        [chr(c) for c in range(0x300, 0x370)],
        [chr(c) for c in range(0x370, 0x530)],
        [chr(c) for c in range(0x4E00, 0x4F00)] + [chr(c) for c in range(0x3040, 0x3100)],
        [chr(c) for c in list(range(0x660, 0x66A)) + list(range(0x966, 0x970)) + list(range(0x2150, 0x2190))],
        ["\u0085", "\u00a0", "\u1680", "\u2000", "\u2009", "\u200a", "\u2028", "\u2029",
         "\u202f", "\u205f", "\u3000", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\u200b", "\ufeff"],
        [chr(c) for c in range(0x1F300, 0x1F700)] + [chr(c) for c in range(0x10000, 0x10100)],
    ]
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        chars = []
        for _ in range(k):
            r = rng.random()
            if r < 0.1:
                c = rng.randrange(0x110000)
                while 0xD800 <= c < 0xE000:
                    c = rng.randrange(0x110000)
                chars.append(chr(c))
            else:
                chars.append(rng.choice(pools[rng.randrange(len(pools))]))
        out.append("".join(chars))
    return out


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    d = lambda *p: os.path.join(root, *p)  # noqa: E731
    ap = argparse.ArgumentParser(description="compare the C encoder's shards with tiktoken")
    ap.add_argument("--text", default=d("data", "tinyshakespeare.txt"))
    ap.add_argument("--encoder-json", default=d("data", "gpt2", "encoder.json"))
    ap.add_argument("--vocab-bpe", default=d("data", "gpt2", "vocab.bpe"))
    ap.add_argument("--val", default=d("data", "tiny_shakespeare_val.bin"))
    ap.add_argument("--train", default=d("data", "tiny_shakespeare_train.bin"))
    ap.add_argument("--tokenizer", default=d("data", "gpt2_tokenizer.bin"))
    ap.add_argument("--val-tokens", type=int, default=32768)
    ap.add_argument("--fixture-out", default=d("test", "fixtures", "tokens_tiktoken.bin"))
    ap.add_argument("--fuzz", type=int, default=0, help="also write N random strings to --fuzz-out")
    ap.add_argument("--fuzz-out", default=d("build", "tokens_fuzz.bin"))
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    for k in ("text", "encoder_json", "vocab_bpe", "val", "train", "tokenizer", "fixture_out", "fuzz_out"):
        setattr(args, k, os.path.relpath(getattr(args, k)))  # shorter paths in messages

    print("tiktoken %s" % tiktoken.__version__)
    enc = build_encoding(args.vocab_bpe, args.encoder_json)
    print("encoding: n_vocab %d, eot %d" % (enc.n_vocab, enc.eot_token))

    with open(args.text, "rb") as f:
        raw = f.read()
    print("text %s: %d bytes, sha256 %s" % (args.text, len(raw), hashlib.sha256(raw).hexdigest()))
    tokens, nsec = encode_like_llmc(enc, raw.decode("utf-8"))
    want_val, want_train = tokens[:args.val_tokens], tokens[args.val_tokens:]
    print("tiktoken: %d sections, %d tokens -> val %d, train %d"
          % (nsec, len(tokens), len(want_val), len(want_train)))

    ok = True
    for name, path, want in (("val", args.val, want_val), ("train", args.train, want_train)):
        got = read_shard(path)
        i = first_mismatch(want, got)
        if i is None:
            print("%s: %s matches tiktoken (%d tokens)" % (name, path, len(got)))
            continue
        ok = False
        if i >= len(want) or i >= len(got):
            print("MISMATCH %s: %s has %d tokens, tiktoken %d (first %d agree)"
                  % (name, path, len(got), len(want), i))
        else:
            lo = max(0, i - 5)
            print("MISMATCH %s: first at token %d: C %d %r, tiktoken %d %r"
                  % (name, i, got[i], enc.decode_single_token_bytes(got[i]),
                     want[i], enc.decode_single_token_bytes(want[i])))
            print("  context C:        %r" % enc.decode_bytes(got[lo:i + 5]))
            print("  context tiktoken: %r" % enc.decode_bytes(want[lo:i + 5]))

    vocab, eot, toks = read_tokenizer(args.tokenizer)
    bad = [i for i in range(vocab) if toks[i] != enc.decode_single_token_bytes(i)]
    if vocab != enc.n_vocab or eot != enc.eot_token or bad:
        ok = False
        print("MISMATCH tokenizer %s: vocab %d eot %d, %d tokens differ (first %s)"
              % (args.tokenizer, vocab, eot, len(bad), bad[:1]))
    else:
        print("tokenizer: %s matches tiktoken (%d tokens, eot %d)" % (args.tokenizer, vocab, eot))

    write_fixture(args.fixture_out, enc, FIXTURE_STRINGS)
    if args.fuzz > 0:
        write_fixture(args.fuzz_out, enc, fuzz_strings(args.fuzz, args.seed))

    if not ok:
        print("FAILED: the C encoder's files differ from tiktoken")
        return 1
    print("OK: C encoder shards and tokenizer match tiktoken exactly "
          "(val %d + train %d = %d tokens)" % (len(want_val), len(want_train), len(tokens)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
