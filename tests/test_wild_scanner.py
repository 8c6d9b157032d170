"""The wild corpus's CUDA-site scanner (benchmarks/cuda_sites.py): what counts as a site."""

from __future__ import annotations

import textwrap
from collections import Counter

import pytest

from benchmarks.cuda_sites import CATEGORIES, scan


def categories(source: str) -> Counter[str]:
    return Counter(site.category for site in scan(textwrap.dedent(source)))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            """
            import torch
            if torch.cuda.is_available():
                torch.cuda.manual_seed_all(0)
            model = model.cuda()
            batch = make_batch().cuda(non_blocking=True)
            """,
            {"cuda_api": 2, "tensor_cuda": 2},
            id="runtime and .cuda()",
        ),
        pytest.param(
            """
            import torch.backends.cudnn as cudnn
            from torch.cuda.amp import GradScaler, autocast
            import cupy as cp
            cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = True
            scaler = GradScaler()
            with autocast():
                pass
            with torch.autocast(device_type='cuda', dtype=torch.float16):
                pass
            with torch.autocast('cpu'):
                pass
            scaler = torch.amp.GradScaler(device=device)
            """,
            {"import": 1, "backends": 2, "amp": 3},
            id="backends and amp",
        ),
        pytest.param(
            """
            import os, torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP
            dist.init_process_group(backend='nccl')
            model = DDP(model, device_ids=[rank], output_device=rank)
            model = torch.nn.DataParallel(model)
            os.environ['CUDA_VISIBLE_DEVICES'] = '0'
            self.embed(text, output_device=device)
            """,
            {"nccl": 1, "device_ids": 2, "data_parallel": 1, "cuda_env": 1},
            id="distributed",
        ),
        pytest.param(
            """
            device = torch.device('cuda' if use_cuda else 'cpu')
            x = x.to(f'cuda:{rank}')
            y = y.to('cuda:{}'.format(rank))
            if device.type == 'gpu':
                pass
            if x.is_cuda:
                b = x.pin_memory()
            """,
            {"device_string": 4, "is_cuda": 1, "pin_memory": 1},
            id="device strings",
        ),
        pytest.param(
            '''
            """Runs on cuda when it can."""
            import argparse
            parser = argparse.ArgumentParser()
            parser.add_argument('--no-cuda', action='store_true', help='disables cuda')
            parser.add_argument('--device', default='cuda', help='cuda or cpu')
            args = parser.parse_args()
            args.cuda = not args.no_cuda
            if args.cuda and cfg['gpu'] and getattr(args, 'cuda', False):
                self.is_cuda = True
            loader = torch.utils.data.DataLoader(ds, pin_memory=True)
            print("cuda")
            amp = None
            ''',
            {"device_string": 1},
            id="help texts, flags, keys and docs are not sites",
        ),
    ],
)
def test_site_counts(source: str, expected: dict[str, int]) -> None:
    assert categories(source) == Counter(expected)


def test_a_help_string_that_mentions_cuda_is_not_a_site() -> None:
    assert scan("p.add_argument('--cuda', help='train on cuda')\n") == []


def test_sites_name_their_line_idiom_and_enclosing_call() -> None:
    (site,) = scan("model = DDP(\n    model,\n    device_ids=[rank],\n)\n")
    assert (site.line, site.category, site.call_line) == (3, "device_ids", 1)
    assert site.idiom == "DDP(device_ids=...)"
    assert site.code == "device_ids=[rank],"


def test_every_category_has_a_reason() -> None:
    assert all(reason.strip() for reason in CATEGORIES.values())


def test_a_site_in_an_expression_over_several_lines_counts_where_it_starts() -> None:
    """The engine reports `torch.device(` and a parenthesised `.cuda()` chain at their first
    line: the wild benchmark counts those sites as reported (gpt-neox, pytorch_geometric)."""
    from benchmarks.wild import _reported

    sites = scan(
        textwrap.dedent(
            """\
            import torch

            device = torch.device(
                "cuda:0" if torch.cuda.is_available() else "cpu")
            x = (
                torch.arange(4)
                .cuda()
            )
            """
        )
    )
    assert {(s.line, s.statement_line) for s in sites} == {(4, 3), (6, 5)}
    assert all(_reported(s, {3, 5}) for s in sites)
    assert not any(_reported(s, {1, 9}) for s in sites)  # a finding outside the statement
