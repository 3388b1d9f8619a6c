#!/usr/bin/env python3
"""
make_test_tokenizers.py - writes the fixtures of test/test_hf_tokenizer.c, the test of the C
tokenizer.json encoder (data/hf_tokenizer.h), with Hugging Face `tokenizers` as the reference.
Offline: it trains small byte-level BPE tokenizers on Tiny Shakespeare (plus a few lines of
other scripts, repeated, so that some merges join multi-byte characters) and records what
tokenizers makes of a set of test texts. CI does not run it; it runs the C test on the
committed output.

Writes test/fixtures/hf_tokenizers/:
  gpt2.json     GPT-2's form: ByteLevel pre-tokenizer (GPT-2's regex), <|endoftext|> as a
                special token that is also a model.vocab entry (id 0: the trainer puts it
                first), merges as [a, b] pairs
  llama3.json   Llama 3's form: Split with Llama 3's pattern + ByteLevel(use_regex false),
                ignore_merges true (and a few whole words added to the vocabulary with no
                merge producing them, which only ignore_merges can emit), the Llama 3 special
                tokens after the vocabulary (<|begin_of_text|>, <|end_of_text|>, ...), a
                TemplateProcessing post-processor that starts with <|begin_of_text|>
  qwen2.json    Qwen2's form: NFC normalizer, Split with Qwen2's pattern + ByteLevel,
                <|endoftext|>, <|im_start|>, <|im_end|> after the vocabulary,
                continuing_subword_prefix / end_of_word_suffix "" as Qwen's files have them
  options.json  the rest of what the C reader supports: ByteLevel with add_prefix_space true,
                NFC, merges as legacy "a b" strings, added tokens with lstrip / rstrip, a
                non-special token matched after normalization (its content is not NFC), a
                non-special raw one, and special tokens one of which is a prefix of another
  expected.json per tokenizer: vocab_size, bos / eos / document separator; per test text
                the ids of encode(text, add_special_tokens=False) ("ids"), the ids with
                encode_special_tokens = True ("ids_ordinary", only where they differ), and
                decode(ids, skip_special_tokens=False) ("decoded", only where it is not the
                text); the count and an FNV-1a hash of the ids of all of Tiny Shakespeare;
                and, for every code point, hashes of what the three pre-tokenizer patterns
                and NFC make of probe strings (see probe_* below: the C test builds the same
                strings)
It also checks, and records, that tokenizers' GPT-2 built from data/gpt2/encoder.json and
vocab.bpe gives the committed shards data/tiny_shakespeare_{val,train}.bin token for token.

Needs: pip install tokenizers (written with 0.23.3).
Usage (repository root): python scripts/make_test_tokenizers.py
"""
import hashlib
import json
import os
import random
import struct
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
import tokenizers

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "test", "fixtures", "hf_tokenizers")
TEXT = os.path.join(ROOT, "data", "tinyshakespeare.txt")

GPT2_PAT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# lines in other scripts, repeated into the training text so that merges join multi-byte
# characters (Tiny Shakespeare is ASCII)
MULTILINGUAL = [
    "Le cœur a ses raisons que la raison ne connaît point. Déjà vu, naïve café, résumé.",
    "Die Würde des Menschen ist unantastbar. Größe, Straße, Übermaß, Äpfel und Öl.",
    "Ἐν ἀρχῇ ἦν ὁ λόγος. Ελληνικά γράμματα και λέξεις.",
    "Москва — столица России. Русский текст для проверки токенизатора.",
    "日本語のテキストです。東京は日本の首都です。漢字とひらがなとカタカナ。",
    "中文文本，用于测试分词器。北京是中国的首都。",
    "한국어 텍스트입니다. 서울은 한국의 수도입니다.",
    "النص العربي للاختبار. القاهرة عاصمة مصر.",
    "हिन्दी पाठ परीक्षण के लिए। नई दिल्ली भारत की राजधानी है।",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧 🇫🇷🇩🇪 ❤️ ✨ 🚀",
    "Numbers ٣٤٥ ١٢ ½ ¾ Ⅻ ² ³ 𝟘𝟙 and 12345 67890 3.14159",
]

# test texts: every tokenizer encodes all of them (another family's special tokens are text)
TEXTS = [
    "", " ", "   ", "\n", "\n\n\n", "\t", " \t \n ", "\r\n", "x",
    "Hello world",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n",
    "I'm sure you're right; we've said they'll go, he'd stay, it's done, don't.",
    "I'M SURE YOU'RE RIGHT, DON'T 'tis 'Tis o'er ''s 'x '",
    "'S 'T 'RE 'Re 'rE 'VE 'M 'LL 'Ll 'D 'ſ 'ſt 'K 'K",
    "rock'n'roll ma'am y'all 's 't 're 've 'm 'll 'd",
    "1 12 123 1234 12345 123456 1234567 12345678901234567890",
    "3.14159 1,000,000 -42 +7 0x1F 2nd 10th 1e10 007",
    "٣٤٥ ١٢ ½ Ⅻ ²³ ① 𝟘𝟙 ۱۲۳۴",
    "a  b   c    d     e",
    "trailing spaces   ", "   leading spaces", "trailing newline\n", "\n\nleading newlines",
    "line1\nline2\n\nline3\r\n\r\nline4\n",
    "tabs\tand\t\tmore\t\t\t tabs",
    "\u00a0nbsp\u3000ideographic\u2003em\u2028ls\u0085nel\u000bvt\u000cff",
    "  \n  x", "x \n\n y", " \n\n\n", "a\n \n b", "!!\n\n", "a.\r\nb", ".\n\n\nx",
    "naïve café résumé",
    "cafe\u0301 (combining) e\u0301\u0301 a\u0308\u0301 A\u030a \u212b \u00c5 q\u0307\u0323",
    "\u1100\u1161\u11a8 \uac00\u11a8 \u1100\u1161 가각 \u0b47\u0b3e \u0f73",
    "Ελληνικά Русский текст Ἐν ἀρχῇ",
    "日本語のテキスト、中文文本。한국어 텍스트",
    "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷 ❤️",
    "mixed: abc123def!!!???... x--y __init__ a/b\\c",
    "(hello) [world] {x} <tag> 'quoted' \"double\" «guillemets»",
    "!!hello ?world (x .y ,z",
    "ÀÉÎÕÜ àéîõü ßẞ ﬁ ﬂ ﬀ ǆ Ǆ ǅ",
    "\u0000\u0001 control \u007f \u001c\u001d",
    "U+FFFD \ufffd BOM \ufeff ZWJ \u200d",
    "math 𝔸𝔹 ∑∫ ≤≥ √2",
    "<|endoftext|>", "<|endoftext|>hello<|endoftext|>",
    "a <|im_start|>user\nhi<|im_end|>\n",
    "<|begin_of_text|>Hi<|end_of_text|>", "<|eot_id|> <|start_header_id|>user<|end_header_id|>\n\n",
    "<|endoftext|", "<|endof<|endoftext|>text|>", "<|im_start|><|im_start|>",
    "<mask> x [SEP]  y", "  <mask>", "x  <mask>  [SEP]\n z", "<both>", " \t<both> \n q",
    "<|a|><|b|> <|a|> <|a|><|b", "Shakespeare cafe\u0301! RAW\u0301 raw\u0301 café!",
    "the other then", " Shakespeare's", "<mask><mask>  <mask>",
    "HELLOWORLD zzyzx Supercalifragilistic     x HELLOWORLDS",
]


def fnv(values):
    h = 1469598103934665603
    for v in values:
        h ^= v
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def scalar_values(lo, hi):
    return [c for c in range(lo, hi) if not (0xD800 <= c <= 0xDFFF)]


PROBE_CHUNK = 8192  # code points per chunk of the probes


def probe_pretok_text(cps):
    # per code point X: contexts around the alternatives of the three patterns
    out = []
    for c in cps:
        X = chr(c)
        out.append(X + "a" + X + "1" + X + " " + X + X + "'s'" + X + "\n" + X + " \n" + "!" + X + "!" + "\r\n" + X + "  ")
    return "".join(out)


def probe_nfc_text(cps):
    out = []
    for c in cps:
        X = chr(c)
        out.append("a\u0301" + X + "\na" + X + "\u0301\na" + X + "\u0316\n" + X + "\u0316\u0301\u0308\n\u1100" + X +
                   "\n" + X + "\u1161\n" + X + "\u11a8\n")
    return "".join(out)


def probes():
    cps = scalar_values(0, 0x110000)
    chunks = [cps[i:i + PROBE_CHUNK] for i in range(0, len(cps), PROBE_CHUNK)]
    res = {"chunk": PROBE_CHUNK, "pretok": {}, "nfc": []}
    for name, pat in (("gpt2", GPT2_PAT), ("llama3", LLAMA3_PAT), ("qwen2", QWEN2_PAT)):
        split = pre_tokenizers.Split(Regex(pat), behavior="isolated")
        hs = []
        for ch in chunks:
            pieces = split.pre_tokenize_str(probe_pretok_text(ch))
            hs.append(fnv(len(p.encode("utf-8")) for p, _ in pieces))
        res["pretok"][name] = hs
    nfc = normalizers.NFC()
    for ch in chunks:
        res["nfc"].append(fnv(nfc.normalize_str(probe_nfc_text(ch)).encode("utf-8")))
    return res


def training_text():
    with open(TEXT, encoding="utf-8") as f:
        text = f.read()
    return text, [text] + ["\n".join(MULTILINGUAL * 20)]


def train(pre, norm, vocab_size, specials):
    tok = Tokenizer(models.BPE())
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    _, corpus = training_text()
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def edit(tok, fn):
    j = json.loads(tok.to_str())
    fn(j)
    return Tokenizer.from_str(json.dumps(j, ensure_ascii=False))


def make_gpt2():
    tok = train(pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True), None, 2000,
                [AddedToken("<|endoftext|>", special=True, normalized=False)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def make_llama3():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok = train(pre, None, 3000, [])

    def f(j):
        m = j["model"]
        m["ignore_merges"] = True
        n = len(m["vocab"])
        # whole words no merge produces: only ignore_merges emits them as one token
        for k, w in enumerate(["\u0120zzyzx", "\u0120Supercalifragilistic", "HELLOWORLD", "\u0120\u0120\u0120\u0120"]):
            assert w not in m["vocab"]
            m["vocab"][w] = n + k
    tok = edit(tok, f)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in LLAMA3_SPECIALS])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def make_qwen2():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok = train(pre, normalizers.NFC(), 3000, [])

    def f(j):
        j["model"]["continuing_subword_prefix"] = ""
        j["model"]["end_of_word_suffix"] = ""
    tok = edit(tok, f)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in QWEN2_SPECIALS])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def make_options():
    tok = train(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True), normalizers.NFC(), 600, [])
    tok.add_tokens([AddedToken("Shakespeare", special=False, normalized=True),
                    AddedToken("cafe\u0301!", special=False, normalized=True),
                    AddedToken("RAW\u0301", special=False, normalized=False),
                    AddedToken("the", special=False, normalized=True)])
    tok.add_special_tokens([AddedToken("<mask>", special=True, normalized=False, lstrip=True),
                            AddedToken("[SEP]", special=True, normalized=False, rstrip=True),
                            AddedToken("<both>", special=True, normalized=False, lstrip=True, rstrip=True),
                            AddedToken("<|a|>", special=True, normalized=False),
                            AddedToken("<|a|><|b|>", special=True, normalized=False)])

    def f(j):  # merges as the legacy "a b" strings
        j["model"]["merges"] = ["%s %s" % (a, b) for a, b in j["model"]["merges"]]
    return edit(tok, f)


def doc_ids(tok, text, sep):
    # llm.c's recipe (dev/data/tinyshakespeare.py): sections split on "\n\n", each after the
    # separator, encoded with "\n\n" appended except the last
    ids = []
    sections = text.split("\n\n")
    for i, s in enumerate(sections):
        ids.append(sep)
        ids.extend(tok.encode(s + "\n\n" if i != len(sections) - 1 else s, add_special_tokens=False).ids)
    return ids


def record(name, tok, text, rng):
    j = json.loads(tok.to_str())
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    bos = tok.token_to_id("<|begin_of_text|>") if name == "llama3" else None
    eos = None
    for s in ("<|endoftext|>", "<|end_of_text|>"):
        if any(a["content"] == s for a in j["added_tokens"]):
            eos = tok.token_to_id(s)
            break
    texts = list(TEXTS)
    for k in range(6):  # windows of Tiny Shakespeare
        at = rng.randrange(0, len(text) - 4000)
        texts.append(text[at:at + 500 + 700 * k])
    alphabet = (list("aAzZ09 '\n\r\t.,!?-_()<>|") + ["<|", "|>", "endoftext", "im_start", "<mask>", "[SEP]", "'s",
                "'LL", "é", "e\u0301", "\u0301", "\u0316", "ß", "日本", "😀", "\u00a0", "\u3000", "\u1100", "\u1161",
                "\u11a8", "가", "٣", "½", "  ", "\n\n", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<both>",
                "<|a|>", "<|b|>", "Shakespeare", "cafe", "RAW", "the"])
    for k in range(300):  # random strings
        texts.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40))))
    cases = []
    for s in texts:
        tok.encode_special_tokens = False
        ids = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        ordinary = tok.encode(s, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        dec = tok.decode(ids, skip_special_tokens=False)
        c = {"text": s, "ids": ids}
        if "\0" in s:  # the C test's JSON reader ends a string at a NUL: give the bytes too
            c["text_hex"] = s.encode("utf-8").hex()
        if ordinary != ids:
            c["ids_ordinary"] = ordinary
        if dec != s:
            c["decoded"] = dec
            if "\0" in dec:
                c["decoded_hex"] = dec.encode("utf-8").hex()
        cases.append(c)
    full = tok.encode(text, add_special_tokens=False).ids
    sep = bos if bos is not None else eos
    docs = doc_ids(tok, text, sep) if sep is not None else []
    print("  %-8s vocab %5d, %d merges, %d test texts; Tiny Shakespeare: %d tokens (%d with the document recipe)"
          % (name, vocab_size, len(j["model"]["merges"]), len(cases), len(full), len(docs)))
    return {"name": name, "file": name + ".json", "vocab_size": vocab_size,
            "bos": -1 if bos is None else bos, "eos": -1 if eos is None else eos,
            "shakespeare": {"ntok": len(full), "hash": fnv(full)},
            "shakespeare_docs": {"ntok": len(docs), "hash": fnv(docs), "separator": -1 if sep is None else sep},
            "cases": cases}


def check_gpt2_files(text):
    # tokenizers' GPT-2 from the repository's encoder.json + vocab.bpe, against the shards
    bpe = models.BPE.from_file(os.path.join(ROOT, "data/gpt2/encoder.json"), os.path.join(ROOT, "data/gpt2/vocab.bpe"))
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    tok.encode_special_tokens = True
    ids = doc_ids(tok, text, 50256)
    shard = []
    for part in ("val", "train"):
        with open(os.path.join(ROOT, "data", "tiny_shakespeare_%s.bin" % part), "rb") as f:
            raw = f.read()
        n = struct.unpack("<i", raw[8:12])[0]
        shard.extend(struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n]))
    same = ids == shard
    print("  gpt2 from data/gpt2 (tokenizers): %d tokens, %s the committed shards"
          % (len(ids), "identical to" if same else "DIFFERENT FROM"))
    if not same:
        sys.exit("make_test_tokenizers.py: tokenizers' GPT-2 disagrees with the committed shards")
    return {"ntok": len(ids), "hash": fnv(ids)}


def main():
    os.makedirs(OUT, exist_ok=True)
    text, _ = training_text()
    rng = random.Random(20261201)
    print("tokenizers %s" % tokenizers.__version__)
    expected = {"tokenizers_version": tokenizers.__version__, "tokenizers": []}
    for name, make in (("gpt2", make_gpt2), ("llama3", make_llama3), ("qwen2", make_qwen2), ("options", make_options)):
        tok = make()
        path = os.path.join(OUT, name + ".json")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(tok.to_str(pretty=False))
            f.write("\n")
        tok = Tokenizer.from_file(path)  # record what the committed file gives
        expected["tokenizers"].append(record(name, tok, text, rng))
    expected["gpt2_files"] = check_gpt2_files(text)
    print("  probing every code point (pre-tokenizer patterns, NFC) ...")
    expected["probes"] = probes()
    path = os.path.join(OUT, "expected.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(expected, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    total = 0
    for fn in sorted(os.listdir(OUT)):
        size = os.path.getsize(os.path.join(OUT, fn))
        total += size
        print("  %-14s %8d bytes" % (fn, size))
    print("  total          %8d bytes" % total)


if __name__ == "__main__":
    main()
