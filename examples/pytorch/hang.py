"""A gloo job in which one rank stops making progress at step 3, the way real jobs hang.

HOW=stop (default): the rank stops itself with SIGSTOP, as if someone pressed Ctrl-Z on it or a
debugger held it. HOW=sleep: the rank gets stuck outside the collective (a data loader that
never returns). The other ranks wait in all_reduce for it, printing nothing. With
`policy.hang_timeout` cohort notices, takes every rank's stack and names the laggard:

    cohort run -f hang.yaml                    # worker/2 on node 1 is stopped ...
    cohort run -f hang.yaml --env HOW=sleep    # worker/2 on node 1 is elsewhere ...
"""
import os
import signal
import time

import torch
import torch.distributed as dist


def load_next_batch():
    time.sleep(3600)  # stands for a read from a filesystem that never answers


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    laggard = int(os.environ.get("LAGGARD", "2")) % dist.get_world_size()
    total = torch.zeros(1)
    for step in range(100):
        if step == 3 and rank == laggard:
            if os.environ.get("HOW", "stop") == "sleep":
                load_next_batch()
            else:
                os.kill(os.getpid(), signal.SIGSTOP)
        total += 1
        dist.all_reduce(total)
        print(f"step {step}", flush=True)
        time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
