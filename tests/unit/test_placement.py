"""Which placement a machine runs a case's ranks under, and why it refuses one: NCCL only with a GPU per rank, the
one-GPU mode (gloo over CUDA tensors, ranks sharing the GPUs) with any GPU, and every refusal naming the GPUs found,
the GPUs needed and the placement."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.ranks.placement import CUDA_GLOO, GLOO, NCCL, Machine, gpu_refusal, resolve, skip_reason, this_machine

CPU_ONLY = Machine("2.13.0+cpu", cuda_build=False, gpus=0)
CUDA_NO_GPU = Machine("2.13.0", cuda_build=True, gpus=0, nccl=True)
ONE_GPU = Machine("2.13.0", cuda_build=True, gpus=1, nccl=True)
FOUR_GPUS = Machine("2.13.0", cuda_build=True, gpus=4, nccl=True)


@pytest.mark.parametrize("machine", [CPU_ONLY, CUDA_NO_GPU, ONE_GPU, FOUR_GPUS], ids=lambda m: m.describe())
def test_gloo_on_cpu_tensors_runs_everywhere(machine: Machine) -> None:
    assert skip_reason("gloo", 4, machine) is None
    assert resolve("gloo", 4, machine) is GLOO


def test_without_a_gpu_every_cuda_placement_says_what_it_found_and_needs() -> None:
    assert skip_reason("cuda-gloo", 2, CPU_ONLY) == (
        "placement cuda-gloo (gloo over CUDA tensors, the ranks sharing the GPUs) with 2 ranks needs 1 GPU(s); "
        "0 GPU(s) found (torch 2.13.0+cpu, a CPU-only build)"
    )
    assert skip_reason("nccl", 2, CUDA_NO_GPU) == (
        "placement nccl (NCCL over CUDA tensors, one GPU per rank) with 2 ranks needs 2 GPU(s); "
        "0 GPU(s) found (torch 2.13.0, a CUDA build)"
    )
    reason = skip_reason("cuda", 4, CPU_ONLY)
    assert reason is not None and "placement cuda-gloo" in reason and "needs 1 GPU(s)" in reason


def test_one_gpu_runs_every_rank_on_it_over_gloo_and_refuses_nccl() -> None:
    assert skip_reason("cuda-gloo", 4, ONE_GPU) is None
    assert resolve("cuda", 4, ONE_GPU) is CUDA_GLOO
    assert [CUDA_GLOO.rank_device(rank, ONE_GPU.gpus) for rank in range(4)] == ["cuda:0"] * 4
    assert skip_reason("nccl", 2, ONE_GPU) == (
        "placement nccl (NCCL over CUDA tensors, one GPU per rank) with 2 ranks needs 2 GPU(s); "
        "1 GPU(s) found (torch 2.13.0, a CUDA build)"
    )


def test_nccl_where_every_rank_has_a_gpu() -> None:
    assert resolve("cuda", 4, FOUR_GPUS) is NCCL
    assert skip_reason("nccl", 4, FOUR_GPUS) is None
    assert [NCCL.rank_device(rank, 4) for rank in range(4)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert resolve("cuda", 8, FOUR_GPUS) is CUDA_GLOO
    assert [CUDA_GLOO.rank_device(rank, 4) for rank in (0, 5)] == ["cuda:0", "cuda:1"]


def test_a_torch_without_nccl_falls_back_to_the_one_gpu_mode() -> None:
    no_nccl = Machine("2.13.0", cuda_build=True, gpus=4, nccl=False)
    assert resolve("cuda", 2, no_nccl) is CUDA_GLOO
    assert skip_reason("nccl", 2, no_nccl) == (
        "placement nccl (NCCL over CUDA tensors, one GPU per rank) with 2 ranks: torch 2.13.0 has no NCCL"
    )


def test_an_unknown_placement_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="no placement named 'mpi' \\(known: gloo, cuda-gloo, nccl, cuda\\)"):
        resolve("mpi", 2, CPU_ONLY)


def test_this_machine_reports_the_torch_it_runs() -> None:
    import torch

    machine = this_machine()
    assert machine.torch_version == torch.__version__
    assert machine.cuda_build == (torch.version.cuda is not None)
    assert machine.gpus == (torch.cuda.device_count() if machine.cuda_build else 0)


@pytest.mark.skipif(this_machine().gpus > 0, reason="this machine has a GPU: the bench's CUDA mode runs here")
def test_the_bench_refuses_cuda_without_a_gpu_before_measuring(tmp_path: Path) -> None:
    from harness.bench import timing

    with pytest.raises(SystemExit, match=r"placement cuda-gloo .* needs 1 GPU\(s\); 0 GPU\(s\) found"):
        timing.main(["--out", str(tmp_path), "--placement", "cuda", "--world-sizes", "2"])
    assert not (tmp_path / "bench.json").exists()


def test_the_gpu_command_refuses_a_machine_without_a_gpu_it_can_use() -> None:
    assert gpu_refusal(ONE_GPU) is None
    assert gpu_refusal(CPU_ONLY) == (
        "nox -s gpu needs a CUDA GPU that torch can use: 0 GPU(s) found (torch 2.13.0+cpu, a CPU-only build)"
    )
    assert gpu_refusal(CUDA_NO_GPU) is not None
