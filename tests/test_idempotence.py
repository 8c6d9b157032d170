"""Idempotence by construction: the KB's own examples, several in one file, migrate to a fixed
point (a second run changes no text and converts nothing), and the regressions that property
found, each as a plain test with its minimal program.

Scale the property with PYTPU_PROPERTY_SCALE and draw new files with PYTPU_PROPERTY_RANDOM=1, as
in test_properties.py.
"""

from __future__ import annotations

import os
import textwrap
import warnings

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pytpu.engine.rewriter import checkout, kb
from pytpu.engine.rewriter.findings import CONVERTED, NOTED

SCALE = float(os.environ.get("PYTPU_PROPERTY_SCALE", "1"))
RANDOM = os.environ.get("PYTPU_PROPERTY_RANDOM") == "1"

KB = kb.default()
# (rule id, example index, before): the examples of the rules for the default target
EXAMPLES = [
    (rule.id, i, example.before)
    for rule in KB.select()
    for i, example in enumerate(rule.examples)
    if example.path == "example.py"
]


@pytest.fixture(scope="module")
def index():
    return checkout.rule_index()


def _compiles(text: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        try:
            compile(text, "<examples>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return False
    return True


def assert_fixed_point(source: str, index) -> str:
    """Migrate `source`, then its output: the second run changes nothing and converts nothing
    (it may still report what it flags). Returns the first run's output."""
    first, _ = checkout.migrate_text(source, index)
    second, findings = checkout.migrate_text(first, index)
    assert second == first, "a second run changed the output"
    converted = [f"{f.rule.id} line {f.line}" for f in findings if f.kind in (CONVERTED, NOTED)]
    assert not converted, f"a second run converted {converted}"
    return first


@settings(
    max_examples=max(1, int(150 * SCALE)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=not RANDOM,
)
@given(picked=st.lists(st.sampled_from(EXAMPLES), min_size=2, max_size=4, unique=True))
def test_kb_examples_together_migrate_to_a_fixed_point(index, picked) -> None:
    source = "\n".join(before for _, _, before in picked)
    assume(_compiles(source))
    assert_fixed_point(source, index)


def test_the_property_draws_from_every_family() -> None:
    families = {KB.find(rule_id).family for rule_id, _, _ in EXAMPLES}
    assert {"device", "cuda", "execution", "distributed", "pitfalls"} <= families


# --- the two regressions the wild benchmark counted ----------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        'DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])',
        'DEVICES = ["cpu"] + ["cuda"] if torch.cuda.is_available() else ["cpu"]',
        'DEVICES = ["cpu"] + ["cuda"]',
    ],
)
def test_a_device_list_the_first_run_simplifies_is_flagged_then(index, line) -> None:
    """`is_available()` becomes True and the conditional folds to `["cpu"] + ["cuda"]`: the
    'cuda' left in the list is flagged (PYTPU903) by the first run, not only by a second."""
    source = (
        f"import pytest\nimport torch\n\n{line}\n\n\n"
        "@pytest.mark.parametrize('device', DEVICES)\n"
        "def test_ones(device):\n    assert torch.ones(2, device=device).sum() == 2\n"
    )
    first = assert_fixed_point(source, index)
    assert '["cpu"] + ' in first
    assert "# PYTPU903:" in first


def test_a_device_list_in_a_training_loops_header_is_flagged_by_the_first_run(index) -> None:
    """The loop is a training step (its barrier is planned on the loop): the 'cuda' its header
    iterates over is still flagged by the first run (found in detectron2's tests)."""
    source = textwrap.dedent(
        """\
        import torch

        for dev in ["cpu"] + ["cuda"] if torch.cuda.is_available() else []:
            out = torch.zeros(2, device=dev)
            out.sum().backward()
        """
    )
    first = assert_fixed_point(source, index)
    assert "torch_xla.sync()" in first and "# PYTPU903:" in first


DDP_RECIPE = textwrap.dedent(
    """\
    import os

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


    def evaluate(model, dataset, local_rank):
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in zip(dataset.tensors[0].split(64), dataset.tensors[1].split(64)):
                x, y = x.cuda(local_rank), y.cuda(local_rank)
                correct += (model(x).argmax(1) == y).sum()
        return correct.item() / len(dataset)


    def main():
        dist.init_process_group(backend="nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dataset = TensorDataset(torch.randn(256, 10), torch.randint(0, 2, (256,)))
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler, drop_last=True)
        model = DDP(nn.Linear(10, 2).cuda(local_rank), device_ids=[local_rank])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            model.train()
            for x, y in loader:
                x, y = x.cuda(local_rank), y.cuda(local_rank)
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
            accuracy = evaluate(model, dataset, local_rank)
            if dist.get_rank() == 0:
                print(f"epoch {epoch}: accuracy {accuracy:.3f}")
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    """
)


def test_a_distributed_recipes_evaluation_loop_gets_its_barrier_in_the_first_run(index) -> None:
    """torchrun-style DDP: the training loop iterates MpDeviceLoader, the evaluation loop (a model
    called under no_grad over batches that are not a DataLoader) ends each step at a barrier:
    all of it in the first run, nothing new in a second."""
    first = assert_fixed_point(DDP_RECIPE, index)
    assert "pl.MpDeviceLoader(loader, torch_xla.device())" in first
    evaluation = first[first.index("def evaluate") : first.index("def main")]
    assert evaluation.count("torch_xla.sync()") == 1
    assert "# PYTPU702 note" in evaluation


# --- what the property found, each with its minimal program --------------------------------------


def test_a_replacement_is_flagged_where_it_goes(index) -> None:
    """`.cuda()` at import time of a file that launches processes becomes `.to(torch_xla.device())`,
    which starts the runtime before the launch (R-DEV-14): flagged by the run that writes it."""
    source = textwrap.dedent(
        """\
        import torch
        import torch_xla

        x = torch.ones(3).cuda()

        def main(index):
            print(x)

        if __name__ == "__main__":
            torch_xla.launch(main)
        """
    )
    first = assert_fixed_point(source, index)
    assert "# PYTPU114:" in first.split("x = torch.ones(3)")[0]


@pytest.mark.parametrize(
    "launch",
    [
        # the launcher's import below the module's code
        "import torch.multiprocessing as mp\n\nmp.spawn(main, nprocs=2)\n",
        # the launcher imported inside the function that launches
        "def run():\n    import torch.multiprocessing as mp\n    mp.spawn(main, nprocs=2)\n",
        # the pre-2.5 PJRT launcher, which a rule renames to torch_xla.launch
        "from torch_xla.experimental import pjrt\n\npjrt.spawn(main, nprocs=2)\n",
    ],
    ids=["import-below", "import-in-function", "pjrt-spawn"],
)
def test_a_launch_is_seen_wherever_its_import_is(index, launch) -> None:
    source = (
        "import torch\n\nmodel = torch.nn.Linear(2, 2).cuda()\n\n"
        "def main(index):\n    print(index)\n\n" + launch
    )
    first = assert_fixed_point(source, index)
    assert "# PYTPU114:" in first.split("model = ")[0]


def test_a_barrier_keeps_a_file_a_device_program(index) -> None:
    """The file's only CUDA word is removed (`torch.cuda.empty_cache()`), the first run gave its
    training loop a barrier: a second run must not take it for a program with no device work
    (and move its model, as R-DEV-22 does for those)."""
    source = textwrap.dedent(
        """\
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        for step in range(100):
            loss = (model(x) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        def release():
            torch.cuda.empty_cache()
        """
    )
    first = assert_fixed_point(source, index)
    assert "torch_xla.sync()" in first
    assert "torch.cuda" not in first


# A training loop PyTPU gives a barrier when the file is a device program.
TRAIN = """\
def train(model, batches):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches:
        loss = (model(x) - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_rewrite_that_writes_the_only_device_work_makes_a_device_program(index) -> None:
    """`.xpu()` is no device word, but its rewrite writes `.to(torch_xla.device())`: the first run
    walks the file as a device program (a barrier in its training loop), as a second would."""
    source = "import torch\n\n" + TRAIN + "\nmodel = torch.nn.Linear(2, 2).xpu()\n"
    first = assert_fixed_point(source, index)
    assert "torch_xla.sync()" in first
    assert "# PYTPU121" not in first  # (not "trains on the CPU")


# A model whose weights are tied before it moves (R-DEV-10 writes a note and a setup statement).
TIED = """\
class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
"""


def test_the_words_of_pytpus_own_comments_are_not_device_work(index) -> None:
    """R-DEV-10's note says `module.to(xla)`: a second run reads no `.to(` device work in it."""
    source = "import torch\nimport torch.nn as nn\n\n" + TIED + "\n" + TRAIN
    first = assert_fixed_point(source, index)
    assert "module.to(xla)" in first
    assert "torch_xla.sync()" not in first


def test_a_setup_statement_is_found_under_the_files_alias(index) -> None:
    """R-DEV-10's setup statement, written as `th.__future__...` in a file that imports torch as
    th, is the statement a second run looks for: it is not added twice."""
    source = "import torch.nn as nn\nimport torch as th\n\n" + TIED + "\nth.cuda.synchronize()\n"
    first = assert_fixed_point(source, index)
    assert first.count("th.__future__.set_swap_module_params_on_conversion(True)") == 1


def test_a_loose_expression_bound_into_a_template_keeps_its_parentheses(index) -> None:
    """`$tensor.cpu()` filled with `(x + 1.0) / 2.0` must call `.cpu()` on the whole of it (found
    in diffusers: `.cpu()` bound to the literal 2.0, and a second run added another)."""
    source = textwrap.dedent(
        """\
        import torch
        from torchvision.utils import save_image

        x = torch.zeros(3, 8, 8).to("cuda")
        save_image((x + 1.0) / 2.0, "a.png")
        save_image(x * 0.5 + 0.5, "b.png")
        """
    )
    first = assert_fixed_point(source, index)
    assert 'save_image(((x + 1.0) / 2.0).cpu(), "a.png")' in first
    assert 'save_image((x * 0.5 + 0.5).cpu(), "b.png")' in first
