#!/usr/bin/env python3
"""Generate the tokenizer exactness fixtures from Hugging Face `tokenizers` (the reference).

Writes into tests/fixtures/tokenizer/:
  qwen3_encode.jsonl    {"text", "ids"} per line: HF encode of a varied corpus with Qwen3's tokenizer.json
  qwen3_decode.jsonl    {"ids", "text"} per line: HF decode (skip_special_tokens=False) of random id runs,
                        many of which cut UTF-8 characters (checks the U+FFFD repair)
  qwen35_encode.jsonl   {"text", "ids"}: Qwen3.5's vocab.json + merges.txt + tokenizer_config.json,
                        assembled into the equivalent HF pipeline (no tokenizer.json is published here)
  qwen3*_encode_special_as_text.jsonl  the texts holding an added token's spelling, encoded with
                        special tokens kept as text (HF's encode_special_tokens / split_special_tokens)

HF's NFC normalizer uses Unicode 9.0 tables, while megaqwen uses utf8proc's current ones. They
disagree only on combining marks assigned after Unicode 9.0 that stand out of canonical order (random
strings produce those; real text practically never does). Such texts are left out of the fixtures
and counted, since they test the age of a table rather than the tokenizer.

Deterministic (fixed seed). Usage: tools/make_tokenizer_fixtures.py [--shared DIR] [--out DIR]
"""
import argparse
import json
import pathlib
import random
import sys
import sysconfig
import unicodedata

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

ROOT = pathlib.Path(__file__).resolve().parent.parent

PROSE = [
    "The quick brown fox jumps over the lazy dog. It's a sentence that's used to test typewriters.",
    "I'm sure they're right, but we'd better check: you'll see it isn't what we've been told.",
    "WE'RE SHOUTING NOW. THEY'LL HEAR US. IT'S FINE, ISN'T IT? I'M OK. YOU'D KNOW. WE'VE WON.",
    "In 1969, Apollo 11 landed on the Moon; 600,000,000 people watched. Pi is 3.14159265358979.",
    "Transformers provide thousands of pretrained models to perform tasks on texts such as "
    "classification, information extraction, question answering, summarization, translation.",
    "Mr. O'Neill's dog--a 12-year-old beagle--won't eat before 7:30 a.m. (or after 10 p.m.)!",
    "Email me at first.last+tag@example.co.uk or visit https://example.org/path?q=1&r=two#frag.",
    "  Leading spaces, trailing spaces   \n\n\n   and blank lines\r\n\r\nwith CRLF\tand\ttabs\t\t.",
    "A long sentence with    multiple     spaces between     words, and some\u00a0non-breaking\u00a0ones.",
]

CODE = [
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (let i = 0; i < arr.length; ++i) { sum += arr[i] ** 2; } // 0x1F, 1e-9, 3.5f\n",
    "SELECT name, COUNT(*) AS n FROM users WHERE age >= 18 GROUP BY name HAVING n > 1;\n",
    "```python\nimport numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\n```\n",
    "    \n        \n\t\t\n  fn main() { let v: Vec<u8> = vec![0xff; 16]; println!(\"{:?}\", v); }\n",
    "<html><body><div class=\"a\">&amp; &lt;tag&gt; &#x1F600;</div></body></html>\n",
    "$ cat /etc/passwd | grep -E '^root:' && echo \"ok\" || exit 1\n",
]

MULTILINGUAL = [
    "机器学习是人工智能的一个分支。它使计算机能够从数据中学习，而无需明确编程。",
    "🤗 Transformers 提供了可以轻松地下载并且训练先进的预训练模型的 API 和工具。",
    "東京は日本の首都です。ひらがな、カタカナ、漢字を使います。ｶﾀｶﾅ（半角）も。",
    "한국어는 한글로 씁니다. 안녕하세요! 오늘 날씨가 좋네요.",
    "العربية لغة جميلة. مرحبا بالعالم! كيف حالك اليوم؟ ١٢٣٤٥٦٧٨٩٠",
    "हिन्दी भारत की एक प्रमुख भाषा है। नमस्ते दुनिया! १२३४",
    "ភាសាខ្មែរ គឺជាភាសាផ្លូវការរបស់ប្រទេសកម្ពុជា។",
    "ภาษาไทยเป็นภาษาที่มีวรรณยุกต์ สวัสดีครับ",
    "Русский язык: съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. עברית: שלום עולם.",
    "Tiếng Việt có dấu: Trăm năm trong cõi người ta, chữ tài chữ mệnh khéo là ghét nhau.",
    "Ǆemal, ǅemal, ǆemal; Ÿ, ÿ, ß, ẞ, İstanbul, ı, ﬁ ligature, ﬀ, Å vs Å (angstrom sign).",
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵🇫🇷 1️⃣ #️⃣ 🧑🏿‍🚀 ❤️‍🔥 😀😃😄 🫠 🪿",
    "Math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ = ∫₀^∞ e^{-t} dt ≈ 1.0 ± 0.1; ½ ⅓ ¼; Ω ≠ Ω; ≯ ≮.",
    "Zero-width: a\u200bb\u200cc\u200dd\ufeffe\u2060f; bidi \u202eRTL\u202c; soft\u00adhyphen.",
]

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<tool_response>", "</tool_response>", "<|fim_prefix|>", "<|vision_pad|>",
            "<|file_sep|>", "<|im_start", "im_end|>", "<think", "<<|im_end|>>", "<|im_end|><|im_end|>"]

EDGE = [
    "", " ", "  ", "\n", "\r\n", "\t", " \n ", "a", "'s", "'S", "'ſ", "'ſt", "x'LLy", "don't'", "''''",
    "'re'RE'Re'rE", "He said 'hello'", "1234567890" * 20, "3.14e-10", "١٢٣ ٤٥٦", "①②③ Ⅻ ⅷ",
    " " * 100, "\n" * 50, "\r\n" * 30, "\t" * 40, " \t \n \r \x0b \x0c ", "a" * 5000,
    "supercalifragilisticexpialidocious" * 40, "é" * 300, "\u0301" * 50, "e" + "\u0301" * 20,
    "a\x85b a \x85\x85b", "a \u180e\u180eb", "a\u2028b\u2029c", "\u3000\u3000x", "x\u00a0\u00a0 y",
    "\x00\x01\x02\x1f\x7f", "<think>\u0338", "\u0338<think>", "Ǆ'S", "ﬃ'll", "\U0001F600" * 30,
    "\ufffd\ufffd", "\uffff\U0010ffff\U000e0001", "x" + "\u200d" * 10, "🇺🇸🇺🇸🇺🇸", "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>",
]


def python_sources(rng, count, max_len):
    """Real code and English docstrings: slices of the Python standard library's sources."""
    files = sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    out = []
    while len(out) < count:
        text = rng.choice(files).read_text(encoding="utf-8", errors="replace")
        if len(text) < 200:
            continue
        start = rng.randrange(0, len(text) - 100)
        out.append(text[start:start + rng.randrange(50, max_len)])
    return out


def random_codepoint(rng, kind):
    if kind == "bmp":
        cp = rng.randrange(0x20, 0x10000)
    elif kind == "any":
        cp = rng.randrange(0, 0x110000)
    elif kind == "marks":
        cp = rng.choice([rng.randrange(0x300, 0x370), rng.randrange(0x1AB0, 0x1B00),
                         rng.randrange(0x20D0, 0x2100), rng.randrange(0x1100, 0x1200),
                         rng.randrange(0xAC00, 0xAC40), rng.randrange(0x41, 0x7B)])
    else:  # "ascii": letters, digits, punctuation and whitespace that stress the regex
        cp = ord(rng.choice("abcXYZ019 '\"\t\n\r.,;!?-_()[]{}<>|/\\@#$%^&*+=~`sStTdDmMlLvVeErR"))
    if 0xD800 <= cp < 0xE000:
        cp = 0xFFFD
    return chr(cp)


def random_strings(rng, count):
    out = []
    for _ in range(count):
        kind = rng.choice(["bmp", "any", "marks", "ascii", "ascii", "mixed"])
        n = rng.randrange(1, 40)
        if kind == "mixed":
            out.append("".join(random_codepoint(rng, rng.choice(["bmp", "marks", "ascii", "ascii"]))
                               for _ in range(n)))
        else:
            out.append("".join(random_codepoint(rng, kind) for _ in range(n)))
    return out


def corpus(rng):
    texts = PROSE + CODE + MULTILINGUAL + EDGE
    texts += [unicodedata.normalize("NFD", t) for t in MULTILINGUAL + PROSE[:2]]
    texts += [unicodedata.normalize("NFKD", t) for t in MULTILINGUAL[10:13]]
    texts += python_sources(rng, 250, 900)
    pool = PROSE + CODE + MULTILINGUAL + EDGE[:40]
    for _ in range(400):  # mixtures, with added tokens dropped in between
        parts = []
        for _ in range(rng.randrange(1, 6)):
            parts.append(rng.choice(pool)[: rng.randrange(1, 200)])
            if rng.random() < 0.5:
                parts.append(rng.choice(SPECIALS))
            if rng.random() < 0.3:
                parts.append(rng.choice([" ", "\n", "  ", "\r\n", "\t", ""]))
        texts.append("".join(parts))
    texts += random_strings(rng, 2000)
    return texts


def qwen35_tokenizer(folder):
    config = json.loads((folder / "tokenizer_config.json").read_text())
    tok = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(config["pretokenize_regex"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    entries = sorted(config["added_tokens_decoder"].items(), key=lambda kv: int(kv[0]))
    for id_text, e in entries:
        token = AddedToken(e["content"], single_word=e["single_word"], lstrip=e["lstrip"],
                           rstrip=e["rstrip"], normalized=e["normalized"], special=e["special"])
        tok.add_special_tokens([token]) if e["special"] else tok.add_tokens([token])
        assert tok.token_to_id(e["content"]) == int(id_text), e
    return tok


def same_nfc_as_current_unicode(text, hf_nfc=normalizers.NFC()):
    return hf_nfc.normalize_str(text) == unicodedata.normalize("NFC", text)


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{path}: {len(rows)} cases, {path.stat().st_size} bytes", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=pathlib.Path, default=ROOT.parent / "shared")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "tests" / "fixtures" / "tokenizer")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20240611)

    qwen3 = Tokenizer.from_file(str(args.shared / "models" / "qwen3-0.6b" / "tokenizer.json"))
    texts = corpus(rng)
    kept = [t for t in texts if same_nfc_as_current_unicode(t)]
    print(f"left out {len(texts) - len(kept)} texts whose NFC depends on the Unicode version",
          file=sys.stderr)
    texts = kept
    write_jsonl(args.out / "qwen3_encode.jsonl",
                [{"text": t, "ids": qwen3.encode(t, add_special_tokens=False).ids} for t in texts])

    decode_rows = []
    size = qwen3.get_vocab_size(with_added_tokens=True)
    for _ in range(400):
        ids = [rng.randrange(0, size) for _ in range(rng.randrange(1, 12))]
        decode_rows.append({"ids": ids, "text": qwen3.decode(ids, skip_special_tokens=False)})
    write_jsonl(args.out / "qwen3_decode.jsonl", decode_rows)

    qwen35 = qwen35_tokenizer(args.shared / "models" / "qwen3.5-0.8b")
    sample = texts[:120] + rng.sample(texts[120:], 400)
    write_jsonl(args.out / "qwen35_encode.jsonl",
                [{"text": t, "ids": qwen35.encode(t, add_special_tokens=False).ids} for t in sample])

    # The same texts with special tokens' spellings kept as text (HF's split_special_tokens, what
    # megaqwen perplexity and llama.cpp's parse_special=false do): the texts that hold an added token.
    for name, tok in (("qwen3", qwen3), ("qwen35", qwen35)):
        contents = [t.content for t in tok.get_added_tokens_decoder().values()]
        with_added = [t for t in texts if any(c in t for c in contents)][:300]
        tok.encode_special_tokens = True
        write_jsonl(args.out / f"{name}_encode_special_as_text.jsonl",
                    [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in with_added])


if __name__ == "__main__":
    main()
