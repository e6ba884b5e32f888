"""Run under ``torchrun --nproc_per_node 2``: coCondenser's contrastive loss under DDP (gloo, CPU).

Each rank holds an UNEQUAL even slice of one global batch of spans; rank 0 writes the loss each
rank saw and the DDP-averaged gradients, for the test to compare with one process on the global batch.
The model is float64 (an equivalence test: see conftest's FLOAT64_TOLERANCE) and on the CPU, also
where a GPU is visible.
"""

import faulthandler
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from conftest import random_mlm_batch, tiny_condenser_config  # noqa: E402

from dense_encoders import CoCondenserForPreTraining  # noqa: E402

SLICES = [(0, 6), (6, 8)]  # rank 0: three documents, rank 1: one (a partial batch)


def main(output_path: str) -> None:
    faulthandler.dump_traceback_later(120, exit=True)  # a hang becomes a visible, bounded failure
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = CoCondenserForPreTraining(tiny_condenser_config(late_mlm=False)).double().to("cpu")
    ddp = DistributedDataParallel(model, find_unused_parameters=True)  # no labels: the heads are unused
    batch = random_mlm_batch(batch_size=8, seed=1)
    start, stop = SLICES[rank]
    local = {k: v[start:stop] for k, v in batch.items() if k != "labels"}
    output = ddp(**local)  # no labels: the contrastive loss alone
    output.loss.backward()
    losses = [torch.zeros((), dtype=torch.float64) for _ in range(dist.get_world_size())]
    dist.all_gather(losses, output.contrastive_loss.detach())
    spans = [torch.zeros((), dtype=torch.long) for _ in range(dist.get_world_size())]
    dist.all_gather(spans, torch.tensor(output.contrastive_spans))
    if rank == 0:
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        torch.save({"losses": torch.stack(losses), "spans": torch.stack(spans), "grads": grads}, output_path)
    del ddp, output  # free DDP's reducer while the process group is alive (its destructor can stall later)
    dist.barrier()  # tear gloo down together: a rank leaving early can stall the other's shutdown
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
