"""A monitored parent that launches two children (tests/ranks/test_launches.py).

argv: run_root how(fork|spawn|process) steps slow sleep_s kill_at [parent_steps]
The parent trains 3 steps itself first (parent_steps), so its own figures can be told apart.
"""

import os
import sys

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
import workers  # noqa: E402

import trainmeter as tm  # noqa: E402


def main() -> None:
    root, how, steps, slow, sleep_s, kill_at = (sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                                                float(sys.argv[5]), int(sys.argv[6]))
    parent_steps = int(sys.argv[7]) if len(sys.argv) > 7 else 3
    with tm.monitor(name="launch", run_dir=root, interval_s=0.1) as m:
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(parent_steps):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
        if how == "process":  # plain fork Processes: a killed child does not stop the others
            ctx = mp.get_context("fork")
            procs = [ctx.Process(target=workers.train, args=(i, steps, slow, sleep_s, kill_at if i == 1 else -1))
                     for i in range(2)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
        else:
            mp.start_processes(workers.train, args=(steps, slow, sleep_s, kill_at), nprocs=2, start_method=how)
    print("PARENT", m.steps, m.run_dir)
    from trainmeter.widget.view_model import build_state, facts_from_monitor

    tiles = {t["id"]: t for t in build_state(facts_from_monitor(m.context))["tiles"]}  # the end's dashboard
    print("TILES", tiles["step"]["value"], tiles["tokens"]["value"], tiles["tokens"]["label"],
          tiles["throughput"]["value"] is not None)


if __name__ == "__main__":
    main()
