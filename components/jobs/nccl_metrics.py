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
import time

# The last complete content of each file: the plugin truncates a file, then writes it bucket by bucket
# (inspector.cc getOrCreateFileHandle, inspector_prom.cc), so a scrape in between would see it empty or cut, its
# series would go stale and every alert's `for` would start over.
LAST: dict[str, tuple[float, str]] = {}
# A rewrite shorter than what was served is taken as mid-write unless the served one is this old (3 dumps): a job's
# set of series may shrink, a rewrite never takes that long.
FRESH_SECONDS = 90


def collect(folder: str) -> bytes:
    """Every .prom file in `folder` as last read whole, HELP and TYPE lines once per metric (Prometheus refuses a
    repeated TYPE); a file mid-rewrite (empty, cut in a line, or shorter than the last, for a while) is served as it
    last was."""
    seen: set[str] = set()
    out: list[str] = []
    paths = sorted(glob.glob(os.path.join(folder, "*.prom")))
    for gone in set(LAST) - set(paths):  # deleted at shutdown: its GPU's series end
        del LAST[gone]
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError:  # deleted between the listing and the read
            text = ""
        served_at, served = LAST.get(path, (0.0, ""))
        whole = text.strip() and text.endswith("\n")
        if whole and (text.count("\n") >= served.count("\n") or time.time() - served_at > FRESH_SECONDS):
            served_at, served = LAST[path] = (time.time(), text)
        for line in served.splitlines():
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
