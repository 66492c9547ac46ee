#!/usr/bin/env python3
"""Writes src/types/charsets/<charset>.bin: the server's own mapping of each
legacy charset to Unicode, as MariaDB's CONVERT(... USING utf8mb4) gives it.

Usage: scripts/charset-tables.py SOCKET   (a MariaDB server, root without password)

Layout of a table, u16 little-endian throughout:
  256 entries for single bytes: the character, 0xFFFF for the first byte of
      a two-byte character, 0xFFFE for the first byte of a three-byte one
      (EUC-JP's 0x8F), 0 for a byte that is no character (byte 0 is U+0000);
  multibyte charsets: 126 x 191 entries for first bytes 0x81-0xFE and second
      bytes 0x40-0xFE, 0 where the pair is no character;
  ujis/eucjpms: then 94 x 94 entries for 0x8F followed by 0xA1-0xFE twice.
A character the server has no Unicode for is what it shows: '?' (and for
tis620 the U+FFFD its table holds). sluice decodes with these tables and
tests/suite/charsets.rs checks them against the server again, byte by byte.
"""
import os
import struct
import subprocess
import sys

SINGLE = ["armscii8", "ascii", "cp1250", "cp1251", "cp1256", "cp1257", "cp850", "cp852",
          "cp866", "dec8", "geostd8", "greek", "hebrew", "hp8", "keybcs2", "koi8r", "koi8u",
          "latin1", "latin2", "latin5", "latin7", "macce", "macroman", "swe7", "tis620"]
MULTI = ["big5", "cp932", "eucjpms", "euckr", "gb2312", "gbk", "sjis", "ujis"]
THREE = {"ujis", "eucjpms"}
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "types", "charsets")


def query(socket, sql):
    out = subprocess.run(["mariadb", "-S", socket, "-uroot", "-N", "-B", "-e", sql],
                         check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines()]


def chars(hexes):
    return bytes.fromhex(hexes).decode("utf-8")


def sweep(socket, cs, sequences_sql):
    rows = query(socket, f"SELECT HEX(b), HEX(CONVERT(CAST(b AS CHAR CHARACTER SET {cs}) USING utf8mb4)) "
                         f"FROM ({sequences_sql}) t")
    return {bytes.fromhex(b): chars(u) for b, u in rows}


def code(text):
    (c,) = text
    assert ord(c) < 0xFFFE, f"U+{ord(c):X} does not fit the table"
    return ord(c)


def main():
    socket = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    for cs in SINGLE + MULTI:
        single = sweep(socket, cs, "SELECT CHAR(seq) b FROM seq.seq_0_to_255")
        table = [code(single[bytes([b])]) for b in range(256)]
        double, triple = [], []
        if cs in MULTI:
            pairs = sweep(socket, cs, "SELECT CONCAT(CHAR(a.seq), CHAR(c.seq)) b "
                                      "FROM seq.seq_129_to_254 a, seq.seq_64_to_254 c")
            # A pair is one character when the server gives one character for it
            # (its '?' included: a well-formed pair it has no Unicode for).
            double = [code(pairs[bytes([a, c])]) if len(pairs[bytes([a, c])]) == 1 else 0
                      for a in range(0x81, 0xFF) for c in range(0x40, 0xFF)]
            for a in range(0x81, 0xFF):
                if any(double[(a - 0x81) * 191 + i] for i in range(191)):
                    assert table[a] == ord("?"), f"{cs}: {a:02X} is a character and a first byte"
                    table[a] = 0xFFFF
            if cs in THREE:
                triples = sweep(socket, cs, "SELECT CONCAT(CHAR(143), CHAR(a.seq), CHAR(c.seq)) b "
                                            "FROM seq.seq_161_to_254 a, seq.seq_161_to_254 c")
                triple = [code(triples[bytes([0x8F, a, c])]) if len(triples[bytes([0x8F, a, c])]) == 1 else 0
                          for a in range(0xA1, 0xFF) for c in range(0xA1, 0xFF)]
                assert table[0x8F] == ord("?")
                table[0x8F] = 0xFFFE
            # Any other byte the server shows as '?' cannot stand alone: the
            # server refuses it in a value of this charset.
            for b in range(0x80, 0x100):
                if table[b] == ord("?"):
                    table[b] = 0
        with open(os.path.join(OUT, f"{cs}.bin"), "wb") as f:
            f.write(struct.pack(f"<{len(table + double + triple)}H", *(table + double + triple)))
        print(cs, len(table), len(double), len(triple))


if __name__ == "__main__":
    main()
