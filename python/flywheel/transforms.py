"""Transforms that run in C++ for flywheel.Loader (docs/transforms.md).

``DecodeImage`` decodes a binary column of JPEG bytes on the loader's worker
threads while they fill a batch (libjpeg-turbo, scaled decoding, then
random-resized-crop, flip, resize, optional float normalisation, written
straight into the batch buffer). Each row's crop and flip are a pure function
of (seed, epoch, table, row), so they are the same for any thread count,
world size or resume point::

    loader = flywheel.Loader("data/imagenet", batch_size=256, num_threads=2,
                             transforms=[DecodeImage("jpeg", 224, 224, dtype="float32",
                                                     layout="chw", mean=IMAGENET_MEAN,
                                                     std=IMAGENET_STD)],
                             on_error="skip")   # undecodable rows left out, counted

``PackTokens`` packs a ``list<int32>`` column of token lists into fixed
``seq_len`` blocks (C++; the GIL is released). It runs on each batch: the
batch's documents are packed into ``ceil(tokens / seq_len)`` blocks, so no
token is lost or duplicated and the loader's state stays exact (the last
block of each batch is padded; larger batches pad less)::

    loader = flywheel.Loader("data/corpus", batch_size=64, columns=["tokens"],
                             transforms=[PackTokens("tokens", seq_len=2048, eos_token=2)])
    batch = loader.next()   # {"tokens": int32[k, 2048], "segment_ids", "positions", "mask", ...}

``pack_tokens(offsets, values, seq_len, ...)`` is the same packing on plain
arrays.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from . import _core
from ._convert import ListArray

__all__ = ["DecodeImage", "PackTokens", "ChatTokenize", "pack_tokens", "IMAGENET_MEAN", "IMAGENET_STD"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class DecodeImage:
    """Decode the JPEG bytes of ``column`` into ``height`` x ``width`` RGB images.

    Args:
      crop: "random_resized" (torchvision's RandomResizedCrop: area fraction in
        ``scale``, aspect ratio log-uniform in ``ratio``, ``max_attempts``
        tries, then a centre crop), "center" (the centred box of
        ``center_fraction`` of the shorter side, for evaluation) or "full"
        (the whole image, resized).
      flip: probability of a horizontal flip (0 for evaluation).
      dtype: "uint8" (0-255) or "float32" ((x / 255 - mean) / std per channel).
      layout: "hwc" ([H, W, 3]) or "chw" ([3, H, W]).
      max_pixels: images whose header declares more pixels are refused.
      scaled_decode: let libjpeg-turbo decode at 1/8..1/2 scale when the crop
        allows (much faster for small outputs; default True).
      fast_dct: the fast integer IDCT (a little faster, slightly less accurate).
      fast_upsample: chroma upsampled by repeating samples, merged with the
        colour conversion, instead of the smoothing filter (faster for 4:2:0
        and 4:2:2 JPEGs; pixels differ slightly at colour edges).
      allow_warnings: accept images libjpeg warns about (e.g. truncated data,
        missing rows grey) instead of failing them.
      crop_decode: decode only the rows and columns the crop needs (default;
        bytes below the crop are then never read, so damage there goes
        unnoticed); False decodes every pixel.
      index_cache_mb: from the second time an image is seen, keep a small
        index of where its coded blocks start (about 14 bytes per 16x16
        pixels), so later epochs decode a crop without entropy-decoding the
        rest of the image; same output bytes, about 1.35x faster random crops.
        One process-wide cache of at most this many MiB (0 = off; needs
        crop_decode). See docs/transforms.md, "Entropy index".
      fast_huffman: Huffman-decode with flywheel's decoder (the same
        coefficients as libjpeg-turbo's, so the same pixels; faster) for the
        JPEGs it supports (baseline, one scan, no restart markers); False
        uses libjpeg-turbo's everywhere.
    """

    def __init__(self, column: str, height: int = 224, width: Optional[int] = None, *,
                 crop: str = "random_resized", scale: Tuple[float, float] = (0.08, 1.0),
                 ratio: Tuple[float, float] = (3 / 4, 4 / 3), max_attempts: int = 10,
                 center_fraction: float = 0.875, flip: float = 0.5, dtype: str = "uint8",
                 layout: str = "hwc", mean: Sequence[float] = (0.0, 0.0, 0.0),
                 std: Sequence[float] = (1.0, 1.0, 1.0), max_pixels: int = 1 << 28,
                 scaled_decode: bool = True, fast_dct: bool = False, allow_warnings: bool = False,
                 crop_decode: bool = True, fast_upsample: bool = False, index_cache_mb: int = 256,
                 fast_huffman: bool = True):
        if not isinstance(column, str) or not column:
            raise TypeError("DecodeImage: column must be a column name")
        self.column = column
        self.options: Dict[str, Any] = {
            "height": int(height), "width": int(width if width is not None else height), "crop": crop,
            "scale": (float(scale[0]), float(scale[1])), "ratio": (float(ratio[0]), float(ratio[1])),
            "max_attempts": int(max_attempts), "center_fraction": float(center_fraction), "flip": float(flip),
            "layout": layout, "dtype": dtype, "mean": tuple(float(m) for m in mean),
            "std": tuple(float(s) for s in std), "max_pixels": int(max_pixels),
            "scaled_decode": bool(scaled_decode), "fast_dct": bool(fast_dct),
            "allow_warnings": bool(allow_warnings), "crop_decode": bool(crop_decode),
            "fast_upsample": bool(fast_upsample), "index_cache_mb": int(index_cache_mb),
            "fast_huffman": bool(fast_huffman),
        }
        if len(self.options["mean"]) != 3 or len(self.options["std"]) != 3:
            raise ValueError("DecodeImage: mean and std need 3 values (R, G, B)")

    def __repr__(self) -> str:
        o = self.options
        return f"DecodeImage({self.column!r}, {o['height']}, {o['width']}, crop={o['crop']!r}, dtype={o['dtype']!r})"


def pack_tokens(offsets: np.ndarray, values: np.ndarray, seq_len: int, *, eos_token: Optional[int] = None,
                pad_token: int = 0, split_documents: bool = True,
                positions_continue: bool = False) -> Dict[str, Any]:
    """Pack documents ``values[offsets[i]:offsets[i+1]]`` into ``seq_len`` blocks.

    Returns ``tokens``, ``segment_ids`` (1, 2, ... per document piece in a
    block, 0 = padding), ``positions`` (restart at every document and block
    start unless ``positions_continue``) and ``mask`` (1 = real token), each
    ``[num_blocks, seq_len]``; ``first_document`` (``[num_blocks]``, the
    document each block starts in) and ``truncated_tokens`` (tokens dropped
    with ``split_documents=False``). Semantics: docs/transforms.md, "Token packing".
    """
    return _core.pack_tokens(np.asarray(offsets, dtype=np.int64), np.asarray(values, dtype=np.int32),
                             int(seq_len), bool(split_documents), eos_token, int(pad_token),
                             bool(positions_continue))


class PackTokens:
    """Batch transform: pack the ``list<int32>`` column ``column`` of each batch
    into ``seq_len`` blocks. The batch becomes the packed arrays (see
    :func:`pack_tokens`) plus ``"document_rows"``: for each block, the table
    row index of the document it starts in (when the loader returns indices)."""

    def __init__(self, column: str, seq_len: int, *, eos_token: Optional[int] = None, pad_token: int = 0,
                 split_documents: bool = True, positions_continue: bool = False):
        self.column = column
        self.seq_len = int(seq_len)
        self.kw = dict(eos_token=eos_token, pad_token=pad_token, split_documents=split_documents,
                       positions_continue=positions_continue)
        self.truncated_tokens = 0

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        if self.column not in batch:
            raise KeyError(f"PackTokens: the batch has no column {self.column!r} (columns: {sorted(batch)})")
        col = batch[self.column]
        if isinstance(col, list):
            # A nested list<int?> column (Arrow's default list type) as Python
            # lists: packed when no element is null.
            rows = [r or [] for r in col]
            if any(v is None for r in rows for v in r):
                raise ValueError(f"PackTokens: column {self.column!r} holds a null token")
            lengths = np.fromiter(map(len, rows), np.int64, len(rows))
            offs = np.zeros(len(rows) + 1, np.int64)
            np.cumsum(lengths, out=offs[1:])
            vals = np.fromiter((v for r in rows for v in r), np.int64, int(offs[-1]))
            col = (offs, vals)
        if not (isinstance(col, tuple) and len(col) == 2):
            raise TypeError(f"PackTokens: column {self.column!r} must be a list<int> column "
                            f"(got {type(col).__name__})")
        offsets, values = col
        if values.dtype.kind not in "iu":
            raise TypeError(f"PackTokens: column {self.column!r} holds {values.dtype}, need integer tokens")
        if values.dtype != np.int32:
            if values.size and (values.min() < -2**31 or values.max() >= 2**31):
                raise ValueError(f"PackTokens: column {self.column!r} has tokens outside int32")
            values = values.astype(np.int32)
        out = pack_tokens(offsets, values, self.seq_len, **self.kw)
        self.truncated_tokens += out.pop("truncated_tokens")
        if "__index__" in batch:
            out["document_rows"] = np.asarray(batch["__index__"])[out["first_document"]] \
                if len(out["first_document"]) else np.zeros(0, np.int64)
        return out

    def __repr__(self) -> str:
        return f"PackTokens({self.column!r}, seq_len={self.seq_len})"


def _token_at_or_after(enc, start: int, end: int):
    """The first token that starts in [start, end), or None."""
    for c in range(start, end):
        t = enc.char_to_token(c)
        if t is not None and enc.token_to_chars(t)[0] >= start:
            return t
        if t is not None:
            # `c` is inside a token that began before `start`: the next one.
            return t + 1 if t + 1 < len(enc.ids) and enc.token_to_chars(t + 1)[0] < end else None
    return None


def _token_at_or_before(enc, pos: int, start: int):
    """The token containing character `pos` (or the last before it), if it starts at or after `start`."""
    for c in range(pos, start - 1, -1):
        t = enc.char_to_token(c)
        if t is not None:
            return t if enc.token_to_chars(t)[0] >= start else None
    return None


class ChatTokenize:
    """Batch transform for chat data: applies a chat template to a ``messages``
    column (``list<struct<role: string, content: string>>``, e.g. read from a
    Hugging Face chat dataset), tokenises it, and marks the tokens a model
    should learn from: ``loss_mask`` is 1 on the tokens of assistant turns'
    content (``assistant_only=True``, the default) or on every token.

    The batch gains ``input_ids`` and ``loss_mask``, both :class:`ListArray`
    with the same offsets (int32 ids, uint8 mask), one row per conversation;
    a null conversation gives an empty row. With ``seq_len`` the rows are then
    packed as :class:`PackTokens` packs (``tokens``, ``segment_ids``,
    ``positions``, ``mask``, ``first_document``) and ``loss_mask`` is packed
    the same way, ``[num_blocks, seq_len]`` (0 on padding and EOS).

    How a mask is found (docs/transforms.md, "Chat templates"): the template
    is rendered once per conversation (compiled once per transform); each
    assistant message's content is located in the rendered text in message
    order, and a token is masked in when its first character lies in such a
    span. All rows of a batch are tokenised in one ``encode_batch`` call
    (Hugging Face ``tokenizers``, in parallel) with character offsets; masks
    are computed with numpy.

    Args:
      tokenizer: a :class:`flywheel.llm.Tokenizer` (its chat template and
        ``tokenizer.json``).
      column: the messages column; its entries are lists of
        ``{"role", "content"}`` dicts.
      seq_len: pack into blocks of this many tokens (None: no packing).
      eos_token: with ``seq_len``, appended after each conversation.
    """

    def __init__(self, tokenizer, column: str = "messages", *, assistant_only: bool = True,
                 seq_len: Optional[int] = None, eos_token: Optional[int] = None, pad_token: int = 0):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("ChatTokenize: the tokenizer has no chat template")
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        self._template = env.from_string(tokenizer.chat_template)
        self._specials = dict(bos_token=tokenizer.bos_token or "", eos_token=tokenizer.eos_token or "")
        self.tokenizer = tokenizer
        self.column = column
        self.assistant_only = bool(assistant_only)
        self.seq_len = None if seq_len is None else int(seq_len)
        self.eos_token = eos_token
        self.pad_token = int(pad_token)
        self.truncated_tokens = 0

    def render(self, messages) -> str:
        return self._template.render(messages=messages, add_generation_prompt=False, **self._specials)

    def _spans(self, text: str, messages) -> list:
        """Character spans [start, end) of the assistant contents in ``text``."""
        spans, cursor = [], 0
        for i, m in enumerate(messages):
            content = m.get("content") or ""
            at = text.find(content, cursor) if content else cursor
            if at < 0:
                raise ValueError(f"ChatTokenize: message {i}'s content does not appear in the rendered "
                                 "template (a template that rewrites content cannot be masked this way)")
            if m.get("role") == "assistant" and content:
                spans.append((at, at + len(content)))
            cursor = at + len(content)
        return spans

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        if self.column not in batch:
            raise KeyError(f"ChatTokenize: the batch has no column {self.column!r} (columns: {sorted(batch)})")
        rows = batch[self.column]
        texts, spans = [], []
        for r, messages in enumerate(rows):
            if messages is None:
                texts.append("")
                spans.append([])
                continue
            if not isinstance(messages, list):
                raise TypeError(f"ChatTokenize: row {r} of {self.column!r} is a {type(messages).__name__}, "
                                "need a list of {'role', 'content'} dicts")
            text = self.render(messages)
            texts.append(text)
            spans.append(self._spans(text, messages) if self.assistant_only else [(0, len(text))])
        encodings = self.tokenizer._tok.encode_batch(texts, add_special_tokens=False)
        id_lists = [e.ids for e in encodings]
        lengths = np.fromiter(map(len, id_lists), np.int64, len(id_lists))
        offsets = np.zeros(len(encodings) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = (np.concatenate([np.asarray(x, np.int32) for x in id_lists if x])
               if offsets[-1] else np.zeros(0, np.int32))
        mask = np.zeros(int(offsets[-1]), np.uint8)
        for r, sp in enumerate(spans):
            e, lo = encodings[r], int(offsets[r])
            for start, end in sp:
                # The tokens whose first character lies in [start, end):
                # found per span, not per token.
                first = _token_at_or_after(e, start, end)
                last = _token_at_or_before(e, end - 1, start)
                if first is not None and last is not None and first <= last:
                    mask[lo + first:lo + last + 1] = 1
        out = dict(batch)
        out["input_ids"] = ListArray(offsets, ids)
        out["loss_mask"] = ListArray(offsets, mask)
        if self.seq_len is None:
            return out
        packed = pack_tokens(offsets, ids, self.seq_len, eos_token=self.eos_token, pad_token=self.pad_token)
        packed_mask = pack_tokens(offsets, mask.astype(np.int32), self.seq_len,
                                  eos_token=None if self.eos_token is None else 0, pad_token=0)
        self.truncated_tokens += packed.pop("truncated_tokens")
        packed["loss_mask"] = packed_mask["tokens"].astype(np.uint8)
        return packed

    def __repr__(self) -> str:
        return f"ChatTokenize({self.column!r}, assistant_only={self.assistant_only}, seq_len={self.seq_len})"
