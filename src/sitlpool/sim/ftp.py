"""MAVFTP, as much as ground stations use on ArduPilot: reading ``@PARAM/param.pck`` (the
packed parameter file MAVProxy and QGroundControl download instead of ~1,300 PARAM_VALUEs).
Any other file or operation is refused at once, so a client falls back without waiting."""

from __future__ import annotations

import struct

from .params import Params

OP_TERMINATE, OP_RESET, OP_OPEN_RO, OP_READ, OP_BURST_READ = 1, 2, 4, 5, 15
ACK, NAK = 128, 129
ERR_FAIL, ERR_EOF, ERR_UNKNOWN_COMMAND, ERR_FILE_NOT_FOUND = 1, 6, 9, 10
MAX_DATA = 239
PCK_TYPES = {2: (1, "<b"), 4: (2, "<h"), 6: (3, "<i"), 9: (4, "<f")}  # MAV_PARAM_TYPE -> param.pck type
PARAM_MAGIC = 0x671B


def param_pck(params: Params) -> bytes:
    """ArduPilot's packed parameter format: header (magic, count, count), then per parameter
    a type byte, a length byte (name length - 1 << 4 | bytes shared with the previous name),
    the name's remaining bytes and the value."""
    out = bytearray(struct.pack("<HHH", PARAM_MAGIC, len(params.names), len(params.names)))
    last = b""
    for name in params.names:
        ptype, fmt = PCK_TYPES.get(params.types[name], (4, "<f"))
        raw = name.encode()[:16]
        common = 0
        while common < min(len(raw), len(last), 15) and raw[common] == last[common]:
            common += 1
        value = params[name]
        packed = struct.pack(fmt, int(value) if ptype != 4 else value)
        out += bytes((ptype, ((len(raw) - common - 1) << 4) | common)) + raw[common:] + packed
        last = raw
    return bytes(out)


class FtpServer:
    """Answers FILE_TRANSFER_PROTOCOL payloads; ``handle`` returns the reply payloads."""

    def __init__(self, params: Params):
        self.params = params
        self.files: dict[int, bytes] = {}  # session -> file content

    @staticmethod
    def _reply(req: tuple, opcode: int, data: bytes = b"", offset: int = 0, burst_complete: int = 0) -> bytes:
        seq, session, req_opcode = req
        head = struct.pack(
            "<HBBBBBBI", (seq + 1) & 0xFFFF, session, opcode, len(data), req_opcode, burst_complete, 0, offset
        )
        return (head + data).ljust(251, b"\0")

    def handle(self, payload: bytes) -> list[bytes]:
        seq, session, opcode, size, _req, _burst, _pad, offset = struct.unpack("<HBBBBBBI", payload[:12])
        data = payload[12 : 12 + size]
        req = (seq, session, opcode)
        nak = lambda err: [self._reply(req, NAK, bytes((err,)))]  # noqa: E731
        if opcode in (OP_TERMINATE, OP_RESET):
            if opcode == OP_RESET:
                self.files.clear()
            else:
                self.files.pop(session, None)
            return [self._reply(req, ACK)]
        if opcode == OP_OPEN_RO:
            path = data.split(b"\0", 1)[0].decode(errors="replace")
            if path.split("?", 1)[0] != "@PARAM/param.pck":
                return nak(ERR_FILE_NOT_FOUND)
            self.files[session] = param_pck(self.params)
            return [self._reply(req, ACK, struct.pack("<I", len(self.files[session])))]
        if opcode in (OP_READ, OP_BURST_READ):
            content = self.files.get(session)
            if content is None:
                return nak(ERR_FAIL)
            if offset >= len(content):
                return nak(ERR_EOF)
            if opcode == OP_READ:
                return [self._reply(req, ACK, content[offset : offset + min(size or MAX_DATA, MAX_DATA)], offset)]
            chunk = min(size or MAX_DATA, MAX_DATA)
            out = []
            for ofs in range(offset, len(content), chunk):
                part = content[ofs : ofs + chunk]
                out.append(self._reply(req, ACK, part, ofs, int(ofs + chunk >= len(content))))
            return out
        return nak(ERR_UNKNOWN_COMMAND)
