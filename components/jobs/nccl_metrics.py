"""fastpath nccl-metrics: serves the NCCL Inspector's Prometheus files of this pod on :PORT/metrics.

NCCL's Inspector profiler plugin (NVIDIA/nccl@v2.30.7-1:plugins/profiler/inspector/inspector_prom.cc), with
NCCL_INSPECTOR_PROM_DUMP=1, rewrites one textfile-collector file per GPU, `<dump dir>/nccl_inspector_metrics_<GPU
UUID>.prom`, every dump interval and deletes it at shutdown. This native sidecar concatenates them on each scrape:
the pod is scraped (a PodMonitor), so a job's ranks carry its pod and job labels and no node-exporter or hostPath
is needed. Standard library only; run as `python3 -c "$(cat nccl_metrics.py)" DIR PORT`.
"""

import glob
import http.server
import os
import sys


def collect(folder: str) -> bytes:
    """Every .prom file in `folder`, HELP and TYPE lines once per metric (Prometheus refuses a repeated TYPE)."""
    seen: set[str] = set()
    out: list[str] = []
    for path in sorted(glob.glob(os.path.join(folder, "*.prom"))):
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:  # rewritten or deleted between the listing and the read: the next scrape has it
            continue
        for line in lines:
            if line.startswith("# "):
                if line in seen:
                    continue
                seen.add(line)
            out.append(line)
    return ("\n".join(out) + "\n").encode() if out else b""


def main() -> None:
    folder, port = sys.argv[1], int(sys.argv[2])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            body = collect(folder) if self.path.split("?")[0] == "/metrics" else b""
            self.send_response(200 if self.path.split("?")[0] == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # scrapes every 30 s would fill the log
            pass

    http.server.ThreadingHTTPServer(("", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
