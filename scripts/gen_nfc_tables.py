#!/usr/bin/env python3
"""
gen_nfc_tables.py - writes data/unicode_nfc.h, the Unicode tables of the C NFC normalizer
that data/hf_tokenizer.h applies for a tokenizer.json whose normalizer is {"type": "NFC"}
(Qwen2 / Qwen2.5).

Which Unicode version. The reference, Hugging Face `tokenizers`, normalizes through the Rust
crate unicode-normalization-alignments, whose tables are Unicode 9.0.0: probing tokenizers
0.23's NFD/NFC with every code point in the contexts  a+X+U+0301, a+U+0301+X, a+X+U+0316,
X+U+0301, X+U+0316+U+0301+U+0308, U+1100+X, X+U+1161, X+U+11A8  agreed with Unicode 9.0.0 on
all 8,896,512 strings, while Unicode 14 (Python 3.11's unicodedata) and 16 (unicodedata2
16.0) differ (U+1DF6..U+1DF9 and U+07FD have no combining class there, U+11938 does not
decompose, ...). So the tables must be Unicode 9.0.0, read through unicodedata2 9.0.0.

unicodedata2 9.0.0 has no wheel for current Pythons and its source needs two one-line fixes
to build on Python >= 3.9 (both outside the Unicode data):
    pip download --no-deps --no-binary :all: unicodedata2==9.0.0.post2
    tar xzf unicodedata2-9.0.0.post2.tar.gz && cd unicodedata2-9.0.0.post2
    # 1. the removed CPython header it includes: a stub of the one struct it declares
    printf 'typedef struct { int size; int (*getname)(PyObject *, Py_UCS4, char *, int, int);\\n'\\
'int (*getcode)(PyObject *, const char *, int, Py_UCS4 *, int); } _PyUnicode_Name_CAPI;\\n' \\
        > unicodedata2/py3/ucnhash.h
    # 2. Py_TYPE() is no longer an lvalue
    sed -i 's/Py_TYPE(&UCD_Type) = &PyType_Type;/Py_SET_TYPE(\\&UCD_Type, \\&PyType_Type);/' \\
        unicodedata2/py3/unicodedata.c
    python setup.py build_ext --inplace && mkdir -p /tmp/ud9 && cp *.so /tmp/ud9/
then run this script with --ud9 /tmp/ud9 (a directory to put first on sys.path).

What the header holds (every code point U+0000..U+10FFFF; Hangul syllables are algorithmic
in the C code and not listed):
  nfc_props   ranges of equal (canonical combining class, NFC_Quick_Check) over the code
              points where either is not the default (ccc 0, quick check Yes). Quick check
              No = has a canonical decomposition but is not its own NFC (the
              Full_Composition_Exclusion set); Maybe = the second code point of some
              primary composite, and the Hangul vowel and trailing jamo.
  nfc_decomp  the canonical decomposition mapping of each code point (one level: one or two
              code points, b = 0 for a singleton), sorted by code point; the C code applies
              it recursively for the full decomposition.
  nfc_comp    indices into nfc_decomp of the primary composites (two-code-point mapping,
              not excluded from composition), sorted by (a, b): canonical composition
              looks a pair up there.

With --check (needs the tokenizers package) it also compares NFC of Unicode 9.0.0 with
tokenizers' NFC on the probe strings above.

Usage:  python scripts/gen_nfc_tables.py --ud9 /tmp/ud9 [-o data/unicode_nfc.h] [--check]
"""
import argparse
import os
import sys

EXPECTED_VERSION = "9.0.0"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("-o", "--out", default=os.path.normpath(os.path.join(here, "..", "data", "unicode_nfc.h")))
    ap.add_argument("--ud9", default=None, help="directory holding the unicodedata2 9.0.0 build")
    ap.add_argument("--check", action="store_true", help="compare with tokenizers' NFC")
    args = ap.parse_args()
    if args.ud9:
        sys.path.insert(0, args.ud9)
    try:
        import unicodedata2 as ud
    except ImportError:
        sys.exit("gen_nfc_tables.py: needs unicodedata2 9.0.0 (see the docstring)")
    if ud.unidata_version != EXPECTED_VERSION:
        sys.exit("gen_nfc_tables.py: unicodedata2 has Unicode %s, expected %s (see the docstring; "
                 "pass --ud9 DIR)" % (ud.unidata_version, EXPECTED_VERSION))

    SBASE, SCOUNT = 0xAC00, 11172
    decomp = {}  # cp -> (a, b) one level, b = 0 for a singleton
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or SBASE <= cp < SBASE + SCOUNT:
            continue
        d = ud.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        assert 1 <= len(parts) <= 2, (hex(cp), d)
        decomp[cp] = (parts[0], parts[1] if len(parts) == 2 else 0)

    # primary composites: two-code-point mapping and NFC(c) == c
    comp = {}
    for cp, (a, b) in decomp.items():
        if b != 0 and ud.normalize("NFC", chr(cp)) == chr(cp):
            assert (a, b) not in comp
            comp[(a, b)] = cp
    second = set(b for (a, b) in comp)
    second.update(range(0x1161, 0x1176))  # Hangul V
    second.update(range(0x11A8, 0x11C3))  # Hangul T

    props = []  # [lo, hi, ccc, qc]: qc 0 yes, 1 maybe, 2 no
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        ccc = ud.combining(c)
        if cp in decomp and ud.normalize("NFC", c) != c:
            qc = 2
        elif cp in second:
            qc = 1
        else:
            qc = 0
        if ccc == 0 and qc == 0:
            continue
        if props and props[-1][1] == cp - 1 and props[-1][2] == ccc and props[-1][3] == qc:
            props[-1][1] = cp
        else:
            props.append([cp, cp, ccc, qc])

    dlist = sorted(decomp.items())
    index = {cp: i for i, (cp, _) in enumerate(dlist)}
    clist = sorted(comp.items())  # by (a, b)
    assert len(dlist) < 65536

    L = []
    L.append("/*")
    L.append("unicode_nfc.h - GENERATED by scripts/gen_nfc_tables.py; do not edit.")
    L.append("")
    L.append("Unicode %s canonical decomposition, combining classes and NFC quick check, the" % ud.unidata_version)
    L.append("version of Hugging Face tokenizers' NFC normalizer (see the script). Hangul syllables")
    L.append("are algorithmic and not listed.")
    L.append("  nfc_props:  %d ranges of (ccc, quick check), the code points where ccc != 0 or the" % len(props))
    L.append("              NFC quick check is not Yes (qc: 1 = Maybe, 2 = No)")
    L.append("  nfc_decomp: %d one-level canonical decompositions {cp, a, b} (b = 0: singleton)," % len(dlist))
    L.append("              sorted by cp")
    L.append("  nfc_comp:   %d indices into nfc_decomp of the primary composites, sorted by (a, b)" % len(clist))
    L.append("*/")
    L.append("#ifndef UNICODE_NFC_H")
    L.append("#define UNICODE_NFC_H")
    L.append("")
    L.append("#define NFC_UNICODE_VERSION \"%s\"" % ud.unidata_version)
    L.append("#define NFC_NPROPS %d" % len(props))
    L.append("#define NFC_NDECOMP %d" % len(dlist))
    L.append("#define NFC_NCOMP %d" % len(clist))
    L.append("")
    L.append("static const struct nfc_prop {")
    L.append("    unsigned int lo, hi;")
    L.append("    unsigned char ccc, qc;")
    L.append("} nfc_props[NFC_NPROPS] = {")
    for i in range(0, len(props), 4):
        L.append("    " + " ".join("{0x%X, 0x%X, %d, %d}," % tuple(p) for p in props[i:i + 4]))
    L.append("};")
    L.append("")
    L.append("static const struct nfc_decomp {")
    L.append("    unsigned int cp, a, b;")
    L.append("} nfc_decomp[NFC_NDECOMP] = {")
    for i in range(0, len(dlist), 4):
        L.append("    " + " ".join("{0x%X, 0x%X, 0x%X}," % (cp, a, b) for cp, (a, b) in dlist[i:i + 4]))
    L.append("};")
    L.append("")
    L.append("static const unsigned short nfc_comp[NFC_NCOMP] = {")
    for i in range(0, len(clist), 12):
        L.append("    " + " ".join("%d," % index[cp] for (_, cp) in clist[i:i + 12]))
    L.append("};")
    L.append("")
    L.append("#endif // UNICODE_NFC_H")
    text = "\n".join(L) + "\n"
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="ascii", newline="\n") as f:
        f.write(text)
    os.replace(tmp, args.out)
    print("wrote %s: Unicode %s, %d property ranges, %d decompositions, %d composites"
          % (args.out, ud.unidata_version, len(props), len(dlist), len(clist)))

    if args.check:
        from tokenizers import normalizers
        nfc, nfd = normalizers.NFC(), normalizers.NFD()
        bad = n = 0
        for cp in range(0x110000):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            X = chr(cp)
            for s in ("a\u0301" + X, "a" + X + "\u0301", "a" + X + "\u0316", X + "\u0301",
                      X + "\u0316\u0301\u0308", "\u1100" + X, X + "\u1161", X + "\u11a8"):
                n += 1
                if nfd.normalize_str(s) != ud.normalize("NFD", s) or nfc.normalize_str(s) != ud.normalize("NFC", s):
                    bad += 1
                    if bad <= 10:
                        print("  differs: U+%04X in %r" % (cp, s))
        print("check against tokenizers: %d of %d probe strings differ" % (bad, n))
        if bad:
            sys.exit(1)


if __name__ == "__main__":
    main()
