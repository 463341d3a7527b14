# A WebSocket echo server and a request dump, stdlib only, for the port
# route's tests: GET /headers answers with the request line and headers it
# received; a WebSocket upgrade on any path echoes every text or binary
# frame back until the client closes.
import base64, hashlib, struct, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.websocket()
        body = ("%s %s\n%s" % (self.command, self.path, self.headers)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def websocket(self):
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        r, w = self.rfile, self.wfile
        while True:
            head = r.read(2)
            if len(head) < 2:
                return
            op, n = head[0] & 0x0F, head[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:  # close: answer it and end
                w.write(b"\x88\x00")
                w.flush()
                self.close_connection = True
                return
            if op in (1, 2):
                if len(data) < 126:
                    w.write(bytes([0x80 | op, len(data)]) + data)
                elif len(data) < 65536:
                    w.write(bytes([0x80 | op, 126]) + struct.pack(">H", len(data)) + data)
                else:
                    w.write(bytes([0x80 | op, 127]) + struct.pack(">Q", len(data)) + data)
                w.flush()


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
