"""Run every benchmark (each writes its section of docs/BENCHMARKS.md)."""
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for script in ("endpoint_http.py", "generator_open_loop.py"):
    print(f"== {script}", flush=True)
    subprocess.run([sys.executable, str(HERE / script)], check=True)
