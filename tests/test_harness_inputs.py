"""The harness records what it can and never stops the program: inputs that are not a batch (a
graph's adjacency, sparse or dense, whose rows and columns are the same nodes) are not cut, an
input the harness cannot copy costs its unit only, and torch's own pseudo-modules are no files
of the repository."""

from __future__ import annotations

import textwrap
from pathlib import Path

from pytpu.engine.testgen import record

GRAPH = """
import torch


class GraphConvolution(torch.nn.Module):
    def __init__(self, features, hidden):
        super().__init__()
        self.linear = torch.nn.Linear(features, hidden)

    def forward(self, x, adjacency):
        return torch.sparse.mm(adjacency, self.linear(x))


class DenseGraph(GraphConvolution):
    def forward(self, x, adjacency):
        return adjacency @ self.linear(x)


class Odd(torch.Tensor):
    def detach(self):
        raise RuntimeError("this tensor cannot be copied")


class Scale(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


torch.manual_seed(0)
nodes = 12
edges = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
adjacency = torch.sparse_coo_tensor(edges, torch.ones(6), (nodes, nodes))
x = torch.randn(nodes, 5)
model = GraphConvolution(5, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(x, adjacency).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("dense", DenseGraph(5, 3)(x, adjacency.to_dense()).shape)
print("scaled", Scale(2)(torch.ones(3).as_subclass(Odd)).sum().item())
"""


def test_a_graph_s_inputs_are_kept_whole_and_the_harness_never_stops_the_program(tmp_path: Path):
    (tmp_path / "train.py").write_text(textwrap.dedent(GRAPH))
    run = record.run_once(tmp_path, "python train.py", 120, 1 << 20, [])
    assert run.returncode == 0, run.stderr
    assert "scaled 6.0" in run.stdout
    graph = run.units["train.py::GraphConvolution"]
    assert "cut" not in graph  # 12 nodes kept: a sparse input's leading size is no batch
    assert graph["args"][0].shape == (12, 5) and graph["args"][1].is_sparse
    dense = run.units["train.py::DenseGraph"]  # a dense N x N adjacency (Diego999/pyGAT)
    assert "cut" not in dense and [a.shape for a in dense["args"]] == [(12, 5), (12, 12)]
    assert run.skipped["train.py::Scale"].startswith(
        "the harness could not record it: RuntimeError: this tensor cannot be copied"
    )
    assert run.files == {"train.py"}  # not torch.ops' `_ops.py`, a name without a folder
