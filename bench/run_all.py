"""Run the headline benchmarks — the endpoint's and the generator's, one-shot and streamed — each writing its
section of docs/BENCHMARKS.md (`make bench`). The others (peers, analysis at scale, …) run one by one: each
section names its command."""
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for script, *args in (("endpoint_http.py",), ("generator_open_loop.py",), ("stream_worker.py", "--sessions")):
    print(f"== {script} {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, str(HERE / script), *args], check=True)
