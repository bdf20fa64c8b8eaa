"""Token display strings for modern tokenizers (issue 21): bytes, SentencePiece spaces, byte fallback.

Every tokenizer here is built offline with ``tokenizers``: a byte-level BPE
trained on text with multi-byte characters (GPT-2, Llama 3, Qwen, OLMo,
SmolLM style) and SentencePiece-style vocabularies with ``▁`` and ``<0xNN>``
byte-fallback pieces (Llama 2, Mistral, Gemma, Phi-3 style), each also wrapped
as a Hugging Face fast tokenizer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

import circuitwidgets as cw
from circuitwidgets._text import from_visible, visible_label, visible_token
from circuitwidgets.export import html_page
from circuitwidgets.tokenizer import (
    BYTE_BASE,
    FastTokenizer,
    HFTokenizer,
    PieceScheme,
    VocabTokenizer,
    display_bytes,
    display_text,
    piece_scheme,
    token_bytes,
)

REPO = Path(__file__).resolve().parents[1]
CORPUS = ["the price is 5€ — really — €€€ the end", "café naïve — € the the"]


def byte(b: int) -> str:
    """The byte code point standing for raw byte ``b``."""
    return chr(BYTE_BASE + b)


def byte_level() -> Tokenizer:
    """A GPT-2-style byte-level BPE trained on text with "€" (E2 82 AC) and "—" (E2 80 94)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"]
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def _sp_vocab() -> dict[str, int]:
    """A SentencePiece-style vocabulary: specials, the 256 byte pieces, then words with ``▁``."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece in ["▁", "t", "h", "e", "▁t", "▁th", "▁the", "é", "▁▁", "<0xZZ>"]:
        vocab[piece] = len(vocab)
    return vocab


def sentencepiece(style: str) -> Tokenizer:
    """A SentencePiece-style tokenizer with byte fallback, its decoder as one of the model families ships it.

    ``llama``: Llama 2 / Mistral / Phi-3 (``Replace ▁``, ``ByteFallback``, ``Fuse``, ``Strip``);
    ``gemma``: Gemma (no ``Strip``); ``metaspace``: a ``Metaspace`` pre-tokenizer and decoder
    over a BPE with ``byte_fallback``; ``unigram``: a Unigram model whose vocabulary has the 256 byte pieces.
    """
    vocab = _sp_vocab()
    merges = [("▁", "t"), ("▁t", "h"), ("▁th", "e"), ("▁", "▁")]
    if style == "unigram":
        tok = Tokenizer(models.Unigram([(p, -float(len(p))) for p in vocab], unk_id=0, byte_fallback=True))
    else:
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    steps: list[Any] = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if style == "llama":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([*steps, decoders.Strip(" ", 1, 0)])
    elif style == "gemma":
        tok.normalizer = normalizers.Replace(" ", "▁")
        tok.decoder = decoders.Sequence(steps)
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ["<unk>", "<s>", "</s>"]])
    return tok


def wrappers(tok: Tokenizer, bos: str) -> list[Any]:
    """The ``tokenizers`` adapter and the Hugging Face adapter over the same tokenizer."""
    from transformers import PreTrainedTokenizerFast

    return [
        FastTokenizer(tok, bos_token=bos),
        HFTokenizer(PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos)),  # type: ignore[no-untyped-call]
    ]


SP_STYLES = ["llama", "gemma", "metaspace", "unigram"]


# ------------------------------------------------------------------ bytes as display strings


def test_valid_utf8_is_text_and_other_bytes_are_byte_code_points() -> None:
    assert display_bytes(b" the") == " the"
    assert display_bytes("€".encode()) == "€"
    assert display_bytes("€".encode()[:2]) == byte(0xE2) + byte(0x82)
    assert display_bytes(b"na\xc3") == "na" + byte(0xC3)
    assert display_bytes(b"\xac ok") == byte(0xAC) + " ok"
    assert display_bytes(b"\xed\xb3\x80") == byte(0xED) + byte(0xB3) + byte(0x80)  # an encoded surrogate is not UTF-8


def test_a_real_character_of_the_reserved_range_is_shown_as_its_bytes() -> None:
    """U+EF80 is the bytes EE BE 80: shown so, it cannot be mistaken for the raw byte 0x80."""
    assert display_bytes("\uef80".encode()) == byte(0xEE) + byte(0xBE) + byte(0x80)
    assert display_text("a\uefe2b") == "a" + byte(0xEE) + byte(0xBF) + byte(0xA2) + "b"
    assert display_text("\uef7f\uf000 plain") == "\uef7f\uf000 plain"


@pytest.mark.parametrize(
    "data", [b"", b"abc", "€—é🦀".encode(), b"\xe2\x82", b"\xff\xfe", "\uefe2".encode(), b"\x00\x7f\x80"]
)
def test_token_bytes_inverts_display_bytes(data: bytes) -> None:
    assert token_bytes(display_bytes(data)) == data


def test_every_byte_sequence_of_up_to_two_bytes_round_trips() -> None:
    for a in range(256):
        for b in range(0, 256, 7):
            data = bytes([a, b])
            assert token_bytes(display_bytes(data)) == data


# ------------------------------------------------------------------ byte-level BPE


@pytest.fixture(scope="module")
def gpt2_style() -> Tokenizer:
    return byte_level()


def test_the_byte_level_scheme_is_read_from_the_decoder(gpt2_style: Tokenizer) -> None:
    assert piece_scheme(gpt2_style) == PieceScheme("byte_level")


@pytest.mark.parametrize(
    ("piece", "shown", "visible"),
    [
        ("âĤ", byte(0xE2) + byte(0x82), "\\xe2\\x82"),  # first two bytes of "€"
        ("ĠâĢ", " " + byte(0xE2) + byte(0x80), "·\\xe2\\x80"),  # space + first two bytes of "—"
        ("aÃ", "a" + byte(0xC3), "a\\xc3"),  # "a" + first byte of "é"
        ("¯ve", byte(0xAF) + "ve", "\\xafve"),  # last byte of "ï" + "ve"
        ("âĤ¬", "€", "€"),
        ("ĠâĢĶ", " —", "·—"),
        ("Ġthe", " the", "·the"),
        ("cafÃ©", "café", "café"),
        ("<|endoftext|>", "<|endoftext|>", "<|endoftext|>"),
    ],
)
def test_byte_level_tokens_show_their_bytes(gpt2_style: Tokenizer, piece: str, shown: str, visible: str) -> None:
    token_id = gpt2_style.token_to_id(piece)
    assert token_id is not None, f"the trained vocabulary lacks {piece!r}"
    for tok in wrappers(gpt2_style, "<|endoftext|>"):
        assert tok.token_str(token_id) == shown, type(tok).__name__
        assert visible_token(tok.token_str(token_id)) == visible


def test_partial_bytes_were_a_bare_replacement_character_before(gpt2_style: Tokenizer) -> None:
    """What ``decode([id])`` gives, and what the views showed until now."""
    token_id = gpt2_style.token_to_id("âĤ")
    assert token_id is not None
    assert gpt2_style.decode([token_id]) == "\ufffd"


def test_byte_level_display_strings_agree_with_decode_wherever_decode_is_whole(gpt2_style: Tokenizer) -> None:
    fast, hf = wrappers(gpt2_style, "<|endoftext|>")
    partial = 0
    for i in range(gpt2_style.get_vocab_size()):
        decoded, shown = gpt2_style.decode([i], skip_special_tokens=False), fast.token_str(i)
        assert hf.token_str(i) == shown
        if "\ufffd" in decoded:
            partial += 1
            assert "\ufffd" not in shown and any(BYTE_BASE + 0x80 <= ord(c) <= BYTE_BASE + 0xFF for c in shown)
        else:
            assert shown == decoded
    assert partial >= 5  # the corpus made several partial-byte tokens


def test_the_bytes_of_an_encoding_spell_the_text(gpt2_style: Tokenizer) -> None:
    fast = FastTokenizer(gpt2_style, bos_token=None)
    text = "the price — 5€, café"
    assert b"".join(token_bytes(fast.token_str(i)) for i in fast.encode(text)).decode() == text


def test_ids_past_the_vocabulary_are_numbered(gpt2_style: Tokenizer) -> None:
    for tok in wrappers(gpt2_style, "<|endoftext|>"):
        assert tok.token_str(tok.vocab_size) == f"<{tok.vocab_size}>"
        assert tok.token_str(-1) == "<-1>"


# ------------------------------------------------------------------ SentencePiece


@pytest.mark.parametrize("style", SP_STYLES)
def test_sentencepiece_scheme_is_read_from_the_decoder(style: str) -> None:
    scheme = piece_scheme(sentencepiece(style))
    assert scheme.kind == "pieces" and scheme.byte_fallback
    assert ("▁", " ") in scheme.replacements


@pytest.mark.parametrize("style", SP_STYLES)
@pytest.mark.parametrize(
    ("piece", "shown", "visible"),
    [
        ("▁the", " the", "·the"),
        ("▁", " ", "·"),
        ("▁▁", "  ", "··"),
        ("t", "t", "t"),
        ("é", "é", "é"),
        ("<0x0A>", "\n", "⏎"),
        ("<0x09>", "\t", "→"),
        ("<0x20>", " ", "·"),
        ("<0x41>", "A", "A"),
        ("<0x00>", "\x00", "\\x00"),
        ("<0xE2>", byte(0xE2), "\\xe2"),
        ("<0x85>", byte(0x85), "\\x85"),
        ("<0xFF>", byte(0xFF), "\\xff"),
        ("<0xZZ>", "<0xZZ>", "<0xZZ>"),
        ("<s>", "<s>", "<s>"),
        ("</s>", "</s>", "</s>"),
    ],
)
def test_sentencepiece_tokens_show_spaces_and_bytes(style: str, piece: str, shown: str, visible: str) -> None:
    tok = sentencepiece(style)
    token_id = tok.token_to_id(piece)
    assert token_id is not None
    for wrapped in wrappers(tok, "<s>"):
        assert wrapped.token_str(token_id) == shown, type(wrapped).__name__
        assert visible_token(wrapped.token_str(token_id)) == visible


@pytest.mark.parametrize("style", SP_STYLES)
def test_a_byte_fallback_encoding_spells_the_text(style: str) -> None:
    fast = FastTokenizer(sentencepiece(style), bos_token="<s>")
    text = "the\n€ é the"
    shown = [fast.token_str(i) for i in fast.encode(text)]
    visible = [visible_token(s) for s in shown]
    start = visible.index("⏎")
    assert visible[start : start + 4] == ["⏎", "\\xe2", "\\x82", "\\xac"]
    assert visible[0] == ("t" if style == "gemma" else "·the")  # Gemma's normalizer prepends no "▁"
    assert b"".join(token_bytes(s) for s in shown).decode().removeprefix(" ") == text


def test_the_llama_decoder_strips_the_leading_space_but_the_display_keeps_it() -> None:
    tok = sentencepiece("llama")
    the = tok.token_to_id("▁the")
    assert the is not None
    assert tok.decode([the]) == "the"
    assert FastTokenizer(tok).token_str(the) == " the"


def test_display_strings_are_cached_per_id(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = FastTokenizer(sentencepiece("gemma"), bos_token="<s>")
    the = fast.tokenizer.token_to_id("▁the")
    assert fast.token_str(the) == " the"
    calls: list[int] = []
    real = fast.tokenizer.id_to_token

    class Spy:
        def __getattr__(self, name: str) -> Any:
            return getattr(real.__self__, name)

        def id_to_token(self, i: int) -> str | None:
            calls.append(i)
            piece: str | None = real(i)
            return piece

    monkeypatch.setattr(fast._display, "backend", Spy())
    assert fast.token_str(the) == " the"
    assert calls == []
    fast.token_str(the + 1)
    assert calls == [the + 1]


def test_a_tokenizer_with_no_known_scheme_shows_its_decode() -> None:
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "\u202e": 2}, unk_token="[UNK]"))
    fast = FastTokenizer(tok, bos_token=None)
    assert piece_scheme(tok) == PieceScheme("decode")
    assert [fast.token_str(i) for i in range(3)] == ["[UNK]", "hello", "\u202e"]


def test_a_vocabulary_tokenizer_keeps_its_strings() -> None:
    vocab = VocabTokenizer(["▁the", "\\xe2", byte(0xE2)])
    assert [visible_token(vocab.token_str(i)) for i in range(3)] == ["▁the", "\\xe2", "\\xe2"]
    assert vocab.token_str(1) != vocab.token_str(2)  # the same to the eye, never the same token


def test_the_shipped_tokenizer_still_shows_what_it_decodes() -> None:
    if "attn-only-1l" not in cw.list_pretrained():
        pytest.skip("shipped model missing")
    path = next((REPO / "circuitwidgets" / "pretrained" / "attn-only-1l").rglob("tokenizer.json"))
    fast = FastTokenizer.from_file(path)
    for i in range(fast.vocab_size):
        decoded = fast.tokenizer.decode([i], skip_special_tokens=False)
        if "\ufffd" not in decoded:
            assert fast.token_str(i) == decoded


# ------------------------------------------------------------------ the views' text, mirrored


def _mirror_cases(block: int = 0) -> list[tuple[str, str]]:
    """The (text, shown) pairs of ``js/tests/tokens-mirror.ts``'s JSON block ``block``.

    Block 0: tokens, which vitest checks against ``visibleToken``; block 1:
    names and labels, checked against ``visibleLabel``.
    """
    source = (REPO / "js" / "tests" / "tokens-mirror.ts").read_text(encoding="utf-8")
    blocks = re.findall(r"/\* json \*/(.*?)/\* end json \*/", source, re.DOTALL)
    assert len(blocks) > block
    return [(token, shown) for token, shown in json.loads(blocks[block])]


@pytest.mark.parametrize(("token", "shown"), _mirror_cases())
def test_python_shows_tokens_exactly_as_the_views_do(token: str, shown: str) -> None:
    assert visible_token(token) == shown


@pytest.mark.parametrize(("text", "shown"), _mirror_cases(1))
def test_python_shows_names_and_labels_exactly_as_the_views_do(text: str, shown: str) -> None:
    assert visible_label(text) == shown


def test_typing_what_the_view_shows_gives_back_the_bytes() -> None:
    assert from_visible("\\xe2\\x82") == byte(0xE2) + byte(0x82)
    assert from_visible("·\\xe2\\x80") == " " + byte(0xE2) + byte(0x80)
    assert from_visible("\\u0085\\x0d") == "\x85\r"
    for token, shown in _mirror_cases():
        if "\\" not in token and "·" not in token and "⏎" not in token and "→" not in token:
            assert from_visible(shown) == token


# ------------------------------------------------------------------ transport: comm, export


def _tokens_with_bytes() -> list[str]:
    return ["<s>", " the", byte(0xE2) + byte(0x82), "\n", "\\xe2", "€"]


def _attention(tokens: list[str]) -> cw.AttentionPatterns:
    n = len(tokens)
    pattern = np.tril(np.ones((n, n)))
    pattern /= pattern.sum(-1, keepdims=True)
    return cw.AttentionPatterns.from_arrays(tokens, np.stack([pattern, pattern]))


def test_byte_code_points_survive_jupyters_message_packer() -> None:
    """The kernel packs comm messages as UTF-8 with ``surrogateescape``: our code points must come out whole."""
    from ipywidgets.widgets.widget import _remove_buffers
    from jupyter_client.session import json_packer

    widget = _attention(_tokens_with_bytes())
    state, _, _ = _remove_buffers(widget.get_state())
    wire = json_packer({"method": "update", "state": state})
    assert json.loads(wire.decode("utf-8"))["state"]["tokens"] == _tokens_with_bytes()


def test_surrogate_escapes_would_not_survive_the_packer() -> None:
    """Why the reserved range is Private Use and not U+DC80–U+DCFF: the packer turns a lone surrogate into a raw byte."""
    from jupyter_client.session import json_packer

    with pytest.raises(UnicodeDecodeError):
        json_packer({"tokens": ["\udce2\udc82"]}).decode("utf-8")


def test_byte_code_points_survive_the_html_export(tmp_path: Path) -> None:
    page = html_page(_attention(_tokens_with_bytes()))
    page.encode("utf-8")  # no lone surrogate anywhere
    blocks = re.findall(r'<script type="application/json" class="cw-state">(.*?)</script>', page, re.DOTALL)
    assert blocks
    states = [json.loads(b) for b in blocks]
    assert any(_tokens_with_bytes() == _find_tokens(s) for s in states)


def _find_tokens(state: Any) -> Any:
    """The ``tokens`` list anywhere in a page state."""
    if isinstance(state, dict):
        if "tokens" in state and isinstance(state["tokens"], list):
            return state["tokens"]
        for value in state.values():
            found = _find_tokens(value)
            if found is not None:
                return found
    return None


# ------------------------------------------------------------------ Hugging Face tokenizers without a tokenizers backend


def test_a_sentencepiece_backend_tokenizer_shows_spaces_and_bytes(tmp_path: Path) -> None:
    """transformers' ``SentencePieceBackend`` (no ``tokenizers`` backend) over a model trained here."""
    spm = pytest.importorskip("sentencepiece")
    from transformers import SentencePieceBackend

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the price is 5 euros\nthe end of the story\ncafé naïve the the\n" * 20, encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(tmp_path / "sp"),
        vocab_size=300,
        byte_fallback=True,
        model_type="bpe",
        character_coverage=1.0,
        minloglevel=2,
    )
    hf = HFTokenizer(SentencePieceBackend(vocab_file=str(tmp_path / "sp.model")))  # type: ignore[no-untyped-call]
    assert hf._display is None
    ids = hf.encode("the € é")
    assert [visible_token(hf.token_str(i)) for i in ids] == ["·the", "·", "\\xe2", "\\x82", "\\xac", "·", "é"]
    assert hf.tokenizer.decode([ids[2]]) == "<0xE2>"  # what decode alone shows


class _SlowByteLevel:
    """A slow GPT-2-style tokenizer as transformers 4 had them: pieces, ``byte_decoder``, ``decode``."""

    def __init__(self, pieces: list[str]) -> None:
        from circuitwidgets.tokenizer import gpt2_byte_decoder

        self.pieces = pieces
        self.byte_decoder = gpt2_byte_decoder()
        self.added_tokens_decoder = {0: "<|endoftext|>"}
        self.bos_token_id = 0

    def __len__(self) -> int:
        return len(self.pieces)

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return self.pieces[token_id]

    def decode(self, ids: list[int], clean_up_tokenization_spaces: bool = True) -> str:
        data = bytes(self.byte_decoder[c] for i in ids for c in self.pieces[i]) if ids[0] else b"<|endoftext|>"
        return data.decode("utf-8", errors="replace")


def test_a_slow_byte_level_tokenizer_shows_its_bytes() -> None:
    hf = HFTokenizer(_SlowByteLevel(["<|endoftext|>", "Ġthe", "âĤ", "Ġ.", "ĠâĤ¬"]))
    assert [hf.token_str(i) for i in range(5)] == ["<|endoftext|>", " the", byte(0xE2) + byte(0x82), " .", " €"]
