"""Joining Parquet files of one schema into one file, without re-encoding.

A Parquet file is ``PAR1``, the row groups' column chunks, the footer (a
Thrift compact-protocol ``FileMetaData``), its length and ``PAR1``.  Column
chunks hold no file positions; only the footer does (``RowGroup.file_offset``,
``ColumnChunk.file_offset``, ``ColumnMetaData.data_page_offset`` /
``index_page_offset`` / ``dictionary_page_offset`` / ``bloom_filter_offset``,
``ColumnChunk.offset_index_offset`` / ``column_index_offset``) and the row
groups' ``ordinal``.  So row groups encoded by separate writers (one file
each, in memory) are put one after the other by copying their chunk bytes and
writing one footer: the first part's ``FileMetaData`` with ``num_rows``
summed and every part's row groups, their positions shifted to where their
bytes now start and their ordinals renumbered.  With the parts written by
Arrow with the same schema and options, the result is, byte for byte, the
file one Arrow writer makes of the same tables in the same order
(``tests/io/test_results_file.py``): Arrow writes the footer's fields in
field-id order, which :func:`encode` reproduces from :func:`decode`.

:func:`decode` / :func:`encode`: the Thrift compact protocol, generically (a
struct is a list of ``[field id, type, value]``, in the order read); only the
fields above are interpreted.
"""

from __future__ import annotations

import struct

_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
MAGIC = b"PAR1"

#: position fields: RowGroup.file_offset; ColumnChunk file_offset, offset_index_offset,
#: column_index_offset; ColumnMetaData data_page_offset, index_page_offset,
#: dictionary_page_offset, bloom_filter_offset (parquet.thrift)
_ROW_GROUP_AT, _CHUNK_AT, _META_AT = {5}, {2, 4, 6}, {9, 10, 11, 14}
_NUM_ROWS, _ROW_GROUPS, _COLUMNS, _META, _ORDINAL = 3, 4, 1, 3, 7


class _Reader:
    def __init__(self, buf: bytes):
        self.buf, self.i = buf, 0

    def byte(self) -> int:
        self.i += 1
        return self.buf[self.i - 1]

    def varint(self) -> int:
        shift = out = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return out

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def take(self, n: int) -> bytes:
        self.i += n
        return self.buf[self.i - n:self.i]

    def value(self, t: int, in_list: bool = False):
        if t in (_TRUE, _FALSE):
            return self.byte() if in_list else None   # a field's bool is its type
        if t == _BYTE:
            return self.byte()
        if t in (_I16, _I32, _I64):
            return self.zigzag()
        if t == _DOUBLE:
            return self.take(8)
        if t == _BINARY:
            return self.take(self.varint())
        if t in (_LIST, _SET):
            head = self.byte()
            n, et = head >> 4, head & 0x0F
            if n == 15:
                n = self.varint()
            return et, [self.value(et, True) for _ in range(n)]
        if t == _MAP:
            n = self.varint()
            kt = vt = 0
            if n:
                kv = self.byte()
                kt, vt = kv >> 4, kv & 0x0F
            return kt, vt, [(self.value(kt, True), self.value(vt, True)) for _ in range(n)]
        if t == _STRUCT:
            fields, last = [], 0
            while True:
                head = self.byte()
                if head == 0:
                    return fields
                ft, delta = head & 0x0F, head >> 4
                fid = last + delta if delta else self.zigzag()
                fields.append([fid, ft, self.value(ft)])
                last = fid
        raise ValueError(f"Parquet footer: unknown Thrift compact type {t}")


def _varint(out: bytearray, v: int) -> None:
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _zigzag(out: bytearray, v: int) -> None:
    _varint(out, (v << 1) ^ (v >> 63))


def _write(out: bytearray, t: int, v, in_list: bool = False) -> None:
    if t in (_TRUE, _FALSE):
        if in_list:
            out.append(v)
    elif t == _BYTE:
        out.append(v)
    elif t in (_I16, _I32, _I64):
        _zigzag(out, v)
    elif t == _DOUBLE:
        out += v
    elif t == _BINARY:
        _varint(out, len(v))
        out += v
    elif t in (_LIST, _SET):
        et, items = v
        if len(items) < 15:
            out.append(len(items) << 4 | et)
        else:
            out.append(0xF0 | et)
            _varint(out, len(items))
        for x in items:
            _write(out, et, x, True)
    elif t == _MAP:
        kt, vt, items = v
        _varint(out, len(items))
        if items:
            out.append(kt << 4 | vt)
        for k, x in items:
            _write(out, kt, k, True)
            _write(out, vt, x, True)
    elif t == _STRUCT:
        last = 0
        for fid, ft, x in v:
            if 0 < fid - last <= 15:
                out.append((fid - last) << 4 | ft)
            else:
                out.append(ft)
                _zigzag(out, fid)
            _write(out, ft, x)
            last = fid
        out.append(0)
    else:
        raise ValueError(f"Parquet footer: unknown Thrift compact type {t}")


def decode(footer: bytes) -> list:
    """A ``FileMetaData`` (Thrift compact bytes) as a list of ``[field id, type, value]``."""
    return _Reader(footer).value(_STRUCT)


def encode(meta: list) -> bytes:
    """The Thrift compact bytes of a struct from :func:`decode`."""
    out = bytearray()
    _write(out, _STRUCT, meta)
    return bytes(out)


def split(data) -> tuple[memoryview, list]:
    """A whole Parquet file (bytes-like) as (its row groups' bytes, its decoded footer)."""
    view = memoryview(data)
    if len(view) < 12 or view[:4] != MAGIC or view[-4:] != MAGIC:
        raise ValueError("not a Parquet file (no PAR1 at both ends)")
    n = struct.unpack("<I", view[-8:-4])[0]
    return view[4:len(view) - 8 - n], decode(bytes(view[len(view) - 8 - n:-8]))


def _field(fields: list, fid: int) -> list | None:
    return next((f for f in fields if f[0] == fid), None)


def row_groups(meta: list) -> list:
    """The decoded row groups of a footer (a list, possibly empty)."""
    f = _field(meta, _ROW_GROUPS)
    return [] if f is None else f[2][1]


def num_rows(meta: list) -> int:
    return _field(meta, _NUM_ROWS)[2]


def moved(group: list, shift: int, ordinal: int) -> list:
    """``group`` (a decoded row group, changed in place and returned) with every position
    moved by ``shift`` bytes and its ordinal, if it has one, set to ``ordinal``.  A position
    of 0 is "not set" (byte 0 is ``PAR1``; Arrow writes the deprecated
    ``ColumnChunk.file_offset`` as 0) and stays 0."""
    def move(f: list) -> None:
        if f[2]:
            f[2] += shift

    for f in group:
        if f[0] in _ROW_GROUP_AT:
            move(f)
        elif f[0] == _ORDINAL:
            f[2] = ordinal
        elif f[0] == _COLUMNS:
            for chunk in f[2][1]:
                for c in chunk:
                    if c[0] in _CHUNK_AT:
                        move(c)
                    elif c[0] == _META:
                        for m in c[2]:
                            if m[0] in _META_AT:
                                move(m)
    return group


def footer_of(first: list, groups: list, rows: int) -> bytes:
    """The footer bytes (FileMetaData, its length, ``PAR1``) of a file with the schema and
    key-value metadata of the footer ``first`` and the row groups ``groups`` (``rows`` rows)."""
    meta = [list(f) for f in first]
    _field(meta, _NUM_ROWS)[2] = rows
    rg = _field(meta, _ROW_GROUPS)
    rg[2] = (rg[2][0], groups)
    body = encode(meta)
    return body + struct.pack("<I", len(body)) + MAGIC
