"""What one read on the steady step's path costs, in instructions under callgrind (docs/spec.md section 20).

Each read (a tensor attribute, ``Tensor.tolist()``, ``torch.is_grad_enabled()``, a call of a Python function that
returns ``False``, a list append) runs in a loop of its own, in a fresh process under valgrind callgrind (training
thread, ``--separate-threads=yes``): the slope between a 1,000- and an 11,000-iteration segment, divided by 10,000,
less the same slope of an empty loop. The loops read a 32x32 float tensor and a 0-d CPU tensor, as the tiny loop
of benchmarks/overhead.py does. Figures, and what they say of the floor of a step's cost: docs/spec.md section 20,
"What one read costs".

    python benchmarks/tensor_reads.py            # every read
    python benchmarks/tensor_reads.py dtype shape
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

MARK = os.getppid  # callgrind dumps before each call (--dump-before=getppid)
READS = {
    "empty": "pass",
    "python_call": "returns_false()",
    "append": "values.append(1)",
    "shape": "x.shape",
    "shape_compare": "x.shape == shape",
    "dtype": "x.dtype is dtype",
    "ndim": "x.ndim",
    "is_cpu": "x.is_cpu",
    "tolist": "loss.tolist()",
    "is_grad_enabled": "is_grad_enabled()",
}
SHORT, LONG = 1_000, 11_000


def _child(name: str) -> None:
    import torch

    def returns_false() -> bool:
        return False

    x = torch.randn(32, 32)
    loss = torch.tensor(1.0)
    names = {"x": x, "loss": loss, "shape": x.shape, "dtype": x.dtype, "values": [], "returns_false": returns_false,
             "is_grad_enabled": torch.is_grad_enabled}
    exec(f"def loop(n):\n    for _ in range(n):\n        {READS[name]}\n", names)  # a plain loop: one read a turn
    loop = names["loop"]
    loop(100)  # warm: the interpreter's specialization settles
    MARK()
    loop(SHORT)
    MARK()
    loop(LONG)
    MARK()


def _slope(name: str, out_dir: str) -> float:
    """Instructions per turn of ``name``'s loop: the training thread's long segment less its short one."""
    from overhead import cg_parts, child_env

    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--dump-instr=no", "--dump-before=getppid",
           f"--callgrind-out-file={out_dir}/{name}.%p", sys.executable, os.path.abspath(__file__), "_child", name]
    proc = subprocess.run(cmd, env=dict(child_env(), PYTHONHASHSEED="0"), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: valgrind failed: {proc.stderr[-1500:]}")
    parts, _ = cg_parts(f"{out_dir}/{name}.*")  # part 2: the short segment, part 3: the long one
    return (parts[3] - parts[2]) / (LONG - SHORT)


def main(argv: list[str]) -> int:
    if argv[:1] == ["_child"]:
        _child(argv[1])
        return 0
    unknown = [a for a in argv if a not in READS]
    if unknown:
        print(f"unknown read(s) {unknown}; valid: {sorted(READS)}", file=sys.stderr)
        return 2
    if shutil.which("valgrind") is None:
        print("valgrind not found (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    names = argv or [n for n in READS if n != "empty"]
    with tempfile.TemporaryDirectory() as out_dir:
        empty = _slope("empty", out_dir)
        print(f"instructions per loop turn under callgrind, less the empty loop's {empty:.0f} "
              f"(python {sys.version.split()[0]})")
        for name in names:
            print(f"  {name:<16} {READS[name]:<22} +{_slope(name, out_dir) - empty:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
