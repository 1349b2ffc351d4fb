"""The tokenizers (include/sinkgraph/tokenizer.h) against the reference implementations.

Vocabularies are trained here, on a text the repository ships (README.md and
docs/*.md), by the references' own trainers; our tokenizer is built from what
they wrote and must give the ids and the text they give:
  (a) sentencepiece's BPE with byte fallback: our Vocabulary (GGUF's
      "llama" model) from its pieces, scores and types, against
      SentencePieceProcessor.encode / decode;
  (b) tokenizers' byte-level BPE (GPT-2's, Qwen2's and Llama 3's
      pre-tokenizers): our from_hf_json on the saved tokenizer.json, and our
      Vocabulary (GGUF's "gpt2" model) from its vocab and merges, against
      Tokenizer.encode / decode;
  (c) the sentencepiece model converted by transformers (LlamaTokenizerFast,
      from the slow model) to a tokenizer.json: our from_hf_json against it.
"""
import json
import pathlib
import unicodedata

import pytest

import sinkgraph._C as C

spm = pytest.importorskip("sentencepiece")
tokenizers = pytest.importorskip("tokenizers")

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Text no vocabulary trained on English Markdown has pieces for: byte
# fallback, combining marks, scripts, emoji, odd whitespace.
EXTRA = [
    "",
    " ",
    "  ",
    "Hello world",
    " leading space",
    "trailing space ",
    "two  spaces   three    four",
    "tab\there\tand\ttabs",
    "lines\nand\n\nparagraphs\n",
    "windows\r\nline\r\nends",
    "no-break\u00a0space and ideographic\u3000space",
    "d\u00e9j\u00e0 vu, na\u00efve caf\u00e9, \u00c5ngstr\u00f6m, \u0141\u00f3d\u017a",
    "e\u0301 combining acute, n\u0303",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u4e2d\u6587\u6587\u672c",
    "\ud55c\uad6d\uc5b4 \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u0639\u0631\u0628\u064a \u05e2\u05d1\u05e8\u05d9\u05ea",
    "emoji \U0001F600\U0001F44D\U0001F3FD \u2764\ufe0f \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "numbers 1234567890 3.14159 -42 1,000,000 \u0663\u0664\u0665",
    "it's I'M we'LL they've you'd she'S",
    "code: `x = f(a, b) -> [1, 2]; // ok?` {\"k\": 'v'}",
    "punctuation!!! ... ??? --- ***",
    "<s> not special </s> <unk> <|endoftext|>",
    "\u2581 a literal U+2581 \u2581\u2581",
    "\x00 nul and \x07 bell and \x7f",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "\n".join(f.read_text(encoding="utf-8") for f in files)
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def texts(corpus):
    """Every distinct line of the corpus, long runs of it, and EXTRA."""
    text = corpus.read_text(encoding="utf-8")
    lines = list(dict.fromkeys(line for line in text.split("\n") if line.strip()))
    assert len(lines) > 500, "the corpus is the repository's documentation"
    chunks = [text[i:i + 2000] for i in range(0, min(len(text), 40000), 2000)]
    return lines + chunks + EXTRA


def _assert_same(ours, reference, texts, what):
    mismatches = [t for t in texts if ours(t) != reference(t)]
    assert not mismatches, (f"{what}: {len(mismatches)} of {len(texts)} texts differ, first: "
                            f"{mismatches[0]!r}: ours {ours(mismatches[0])}, "
                            f"reference {reference(mismatches[0])}")


# ---- (a) sentencepiece ----

@pytest.fixture(scope="module")
def spm_model(corpus, tmp_path_factory):
    prefix = tmp_path_factory.mktemp("spm") / "m"
    # Llama's settings: BPE, byte fallback, no normalization (identity, extra
    # whitespace kept), a dummy prefix, digits split.
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), model_type="bpe", vocab_size=800,
        byte_fallback=True, character_coverage=1.0, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, split_digits=True,
        user_defined_symbols=["sinkgraph", "<tool>"], minloglevel=2)
    return pathlib.Path(str(prefix) + ".model")


def spm_vocabulary(path):
    from sentencepiece import sentencepiece_model_pb2
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    sp = spm.SentencePieceProcessor(model_file=str(path))
    return C.Tokenizer.from_vocabulary(
        "sentencepiece", [p.piece for p in proto.pieces], [p.score for p in proto.pieces],
        [int(p.type) for p in proto.pieces], bos=sp.bos_id(), eos=sp.eos_id(),
        unk=sp.unk_id(), add_bos=True, add_space_prefix=proto.normalizer_spec.add_dummy_prefix)


def test_sentencepiece_ids_and_text(spm_model, texts):
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    ours = spm_vocabulary(spm_model)
    assert ours.vocab_size == sp.get_piece_size() == 800
    _assert_same(lambda t: ours.encode(t), lambda t: sp.encode(t), texts, "encode")
    _assert_same(lambda t: ours.encode(t, add_bos=True), lambda t: sp.encode(t, add_bos=True),
                 texts[:50], "encode with BOS")
    _assert_same(lambda t: ours.decode(sp.encode(t, add_bos=True, add_eos=True)),
                 lambda t: sp.decode(sp.encode(t, add_bos=True, add_eos=True)), texts, "decode")
    # The user-defined symbols were matched whole by both.
    assert sp.piece_to_id("sinkgraph") in ours.encode("use sinkgraph now")


def test_sentencepiece_comparison_can_fail(spm_model, texts):
    """Scores in another order merge differently, and the comparison sees it."""
    from sentencepiece import sentencepiece_model_pb2
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(spm_model.read_bytes())
    flipped = C.Tokenizer.from_vocabulary(
        "sentencepiece", [p.piece for p in proto.pieces], [-p.score for p in proto.pieces],
        [int(p.type) for p in proto.pieces], unk=sp.unk_id())
    differ = [t for t in texts if flipped.encode(t) != sp.encode(t)]
    assert len(differ) > len(texts) // 2


# ---- (b) tokenizers' byte-level BPE ----

PATTERNS = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


def train_byte_level(corpus, style):
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
    tok = tokenizers.Tokenizer(models.BPE(ignore_merges=style == "llama-bpe"))
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PATTERNS[style]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tok.train([str(corpus)], trainer)
    return tok


@pytest.mark.parametrize("style", ["gpt2", "qwen2", "llama-bpe"])
def test_byte_level_bpe(corpus, texts, tmp_path, style):
    ref = train_byte_level(corpus, style)
    path = tmp_path / "tokenizer.json"
    ref.save(str(path))
    config = json.loads(path.read_text(encoding="utf-8"))
    assert config["model"]["merges"], "the trainer learned merges"
    ours = C.Tokenizer.from_hf_json(path.read_text(encoding="utf-8"), str(path))

    def reference(t):
        return ref.encode(t, add_special_tokens=False).ids

    _assert_same(lambda t: ours.encode(t, parse_special=True), reference, texts, "from_hf_json")
    _assert_same(lambda t: ours.decode(reference(t)),
                 lambda t: ref.decode(reference(t), skip_special_tokens=True), texts, "decode")

    # The same vocabulary as GGUF carries it: tokens by id, merges "a b".
    vocab = config["model"]["vocab"]
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    types = [3 if t == "<|endoftext|>" else 1 for t in tokens]
    merges = [" ".join(m) if isinstance(m, list) else m for m in config["model"]["merges"]]
    gguf = C.Tokenizer.from_vocabulary("bpe", tokens, types=types, merges=merges,
                                       eos=vocab["<|endoftext|>"], add_bos=False, pre=style)
    # GGUF has no normalizer: Qwen2's NFC is the caller's (llama.cpp skips it too).
    nfc = [unicodedata.normalize("NFC", t) for t in texts]
    _assert_same(lambda t: gguf.encode(t, parse_special=True), reference, nfc, "from_vocabulary")


def test_byte_level_comparison_can_fail(corpus, tmp_path):
    """Another pre-tokenizer regex gives other ids, and the test sees it."""
    ref = train_byte_level(corpus, "gpt2")
    path = tmp_path / "tokenizer.json"
    ref.save(str(path))
    config = json.loads(path.read_text(encoding="utf-8"))
    config["pre_tokenizer"] = {
        "type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERNS["qwen2"]}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]}
    other = C.Tokenizer.from_hf_json(json.dumps(config), "other.json")
    text = "version 2024 and 1234567 digits"
    assert other.encode(text) != ref.encode(text, add_special_tokens=False).ids


# ---- (c) transformers' conversion of the sentencepiece model ----

def test_llama_tokenizer_json(spm_model, texts, tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("google.protobuf")  # transformers reads the model through it
    folder = tmp_path / "spm"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(spm_model.read_bytes())
    hf = transformers.LlamaTokenizerFast.from_pretrained(str(folder))
    hf.save_pretrained(str(tmp_path / "hf"))
    text = (tmp_path / "hf" / "tokenizer.json").read_text(encoding="utf-8")
    config = json.loads(text)
    assert config["model"]["type"] == "BPE" and config["model"]["byte_fallback"]
    ours = C.Tokenizer.from_hf_json(text, "tokenizer.json")
    ref = tokenizers.Tokenizer.from_str(text)

    def reference(t):
        return ref.encode(t, add_special_tokens=False).ids

    _assert_same(lambda t: ours.encode(t, parse_special=True), reference, texts, "from_hf_json")
    _assert_same(lambda t: ours.encode(t, parse_special=True),
                 lambda t: hf.encode(t, add_special_tokens=False), texts[:200], "transformers")
    _assert_same(lambda t: ours.decode(reference(t)),
                 lambda t: hf.decode(reference(t), skip_special_tokens=True), texts, "decode")


def test_errors_reach_python():
    with pytest.raises(C.Error, match="model.type"):
        C.Tokenizer.from_hf_json(json.dumps({"model": {"type": "WordPiece"}}), "t.json")
    tok = C.Tokenizer.from_vocabulary("sentencepiece", ["<unk>", "a"], [0.0, 0.0], unk=0)
    with pytest.raises(C.Error, match="out of range"):
        tok.decode([2])
