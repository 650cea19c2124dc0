"""For the tests of the notebooks' training scripts: run a script under torchrun behind a probe that records, on
each rank, how many DistributedDataParallel objects are still alive when the script destroys its process group.

A DDP model that outlives ``destroy_process_group()`` keeps the group alive until Python exits, and the group
is then torn down while the interpreter is being taken apart: a rank can crash ("terminate called without an
active exception") or hang on its way out. The probe counts without collecting garbage first: a model left to
the collector (DDP objects sit in reference cycles) counts as alive, since it is freed only later.
"""

from __future__ import annotations

import json
from pathlib import Path

from autograd_lab.distributed import torchrun as launch

ENV = "LAB_DDP_PROBE"
WRAPPER = "probe_ddp.py"
_SOURCE = f'''\
import gc, json, os, runpy, sys

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

destroy = dist.destroy_process_group


def probed(*args, **kwargs):
    alive = sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
    with open(os.path.join(os.environ["{ENV}"], "rank%s.json" % os.environ["RANK"]), "w") as f:
        json.dump({{"alive_at_destroy": alive}}, f)
    return destroy(*args, **kwargs)


dist.destroy_process_group = probed
runpy.run_path(sys.argv[1], run_name="__main__")
'''


def wrap(script: Path) -> Path:
    """The probe, written beside ``script``: run it with the script's file name as its argument."""
    wrapper = script.parent / WRAPPER
    wrapper.write_text(_SOURCE)
    return wrapper


def torchrun(script: Path, folder: Path, **kwargs):
    """The course's ``torchrun`` of ``script`` behind the probe, whose counts go into ``folder``."""
    return launch(wrap(script), script.name, env={ENV: str(folder)}, **kwargs)


def alive_at_destroy(folder: Path, nproc: int) -> list[int]:
    """Per rank, the DDP objects alive when the script destroyed its process group."""
    missing = [r for r in range(nproc) if not (folder / f"rank{r}.json").is_file()]
    assert not missing, f"rank(s) {missing} never called destroy_process_group()"
    return [json.loads((folder / f"rank{r}.json").read_text())["alive_at_destroy"] for r in range(nproc)]
