"""Random numbers on the XLA side drawn from the CPU generator, so that the migrated code draws
what the recording drew."""

from __future__ import annotations

import math
from typing import Any

import torch

from pytpu.runtime.placement import device_kind, map_tensors, tensors

_RANDOM_FACTORIES = {
    torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal,
    torch.rand_like, torch.randn_like, torch.randint_like, torch.bernoulli, torch.multinomial,
    torch.Tensor.bernoulli, torch.Tensor.multinomial,
}  # fmt: skip
_RANDOM_IN_PLACE = {
    torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.bernoulli_, torch.Tensor.random_,
    torch.Tensor.exponential_, torch.Tensor.geometric_, torch.Tensor.log_normal_,
    torch.Tensor.cauchy_,
    # torch.nn.init hands its own function to the mode, and the draw inside it is not seen again
    torch.nn.init.uniform_, torch.nn.init.normal_, torch.nn.init.trunc_normal_,
    torch.nn.init.xavier_uniform_, torch.nn.init.xavier_normal_, torch.nn.init.kaiming_uniform_,
    torch.nn.init.kaiming_normal_, torch.nn.init.orthogonal_, torch.nn.init.sparse_,
}  # fmt: skip
_DROPOUTS = {torch.dropout, torch.feature_dropout, torch.nn.functional.dropout,
             torch.nn.functional.dropout1d, torch.nn.functional.dropout2d,
             torch.nn.functional.dropout3d}  # fmt: skip
_IN_PLACE_DROPOUTS = {torch.dropout_: torch.dropout, torch.feature_dropout_: torch.feature_dropout}
# Kept here: a test may hide it from torch.nn.functional to exercise the code's fallback.
_ATTENTION = torch.nn.functional.scaled_dot_product_attention


def _no_torch_function(*args: Any) -> bool:
    return False


class HostRandom(torch.overrides.TorchFunctionMode):
    """On XLA, draw random numbers from the CPU generator and move them to the device.

    XLA's generator gives other numbers than the CPU's for the same seed; drawing on the CPU keeps
    dropout masks, noise and initial values equal to the recording, so results stay comparable.
    """

    # torch.nn.functional and torch.nn.init hand a whole Python function to the mode, and the
    # draws inside it would not be seen; while the mode is on they skip that step, so the mode
    # sees the builtins they call (dropout, normal_, scaled_dot_product_attention, ...).
    _PYTHON_LEVEL = (torch.nn.functional, torch.nn.init)
    _CHECKS = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")

    def __enter__(self):
        self._saved = [
            (module, name, getattr(module, name))
            for module in self._PYTHON_LEVEL
            for name in self._CHECKS
            if hasattr(module, name)
        ]
        for module, name, _ in self._saved:
            setattr(module, name, _no_torch_function)
        return super().__enter__()

    def __exit__(self, *exc):
        for module, name, original in self._saved:
            setattr(module, name, original)
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _RANDOM_FACTORIES:
            given = list(tensors([args, kwargs]))
            on_xla = [t.device for t in given if t.device.type == "xla"]
            target = kwargs.get("device")
            if target is None and not given:
                # torch.set_default_device('xla') applies below this mode: without a device
                # of its own, a factory draws on the default device
                target = torch.get_default_device()
            if target is not None and torch.device(target).type == "xla":
                on_xla.append(torch.device(target))
            if on_xla:
                args, kwargs = map_tensors([list(args), dict(kwargs)], lambda t: t.cpu())
                if target is not None:
                    kwargs["device"] = "cpu"
                return func(*args, **kwargs).to(on_xla[0])
        elif func in _RANDOM_IN_PLACE:
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, torch.Tensor) and target.device.type == "xla":
                on_cpu = target.detach().cpu()
                if args:
                    func(on_cpu, *args[1:], **kwargs)
                else:
                    func(**{**kwargs, "tensor": on_cpu})
                with torch.no_grad():
                    return target.copy_(on_cpu.to(target.device))
        elif func in _IN_PLACE_DROPOUTS and args and args[0].device.type == "xla":
            masked = self.__torch_function__(_IN_PLACE_DROPOUTS[func], types, args, kwargs)
            return args[0].copy_(masked)  # copy_ keeps the autograd history
        elif func in _DROPOUTS and args and isinstance(args[0], torch.Tensor):
            x = args[0]
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            probability = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            if x.device.type == "xla" and training and probability > 0:
                # The CPU computes dropout as x * mask; drawing the mask on ones gives that mask.
                ones = torch.ones(x.shape, dtype=x.dtype, device="cpu")
                mask = func(ones, probability, True)
                return x * mask.to(x.device)
        elif func in _RECURRENT and len(args) == 9 and isinstance(args[2], (list, tuple)):
            if args[0].device.type == "xla" and args[5] > 0 and args[6] and args[4] > 1:
                return _recurrent_with_cpu_dropout(func, *args)
        elif func is _ATTENTION:
            dropout = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
            if args and args[0].device.type == "xla" and dropout > 0:
                return _attention_with_cpu_dropout(*args, **kwargs)
        return func(*args, **kwargs)


# Kernels that draw their own dropout masks: run layer by layer, with the masks drawn as above.
_RECURRENT = {torch.lstm, torch.gru, torch.rnn_tanh, torch.rnn_relu}


def _cpu_dropout_mask(like: torch.Tensor, p: float) -> torch.Tensor:
    ones = torch.ones(like.shape, dtype=like.dtype, device="cpu")
    return torch.nn.functional.dropout(ones, p, True).to(like.device)


def _recurrent_with_cpu_dropout(func, input, hx, params, has_biases, layers, p, train, both, first):
    """A multi-layer RNN as the CPU computes it: each layer, then dropout on its output."""
    directions = 2 if both else 1
    per_layer = (4 if has_biases else 2) * directions
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    output, finals = input, [[] for _ in states]
    for layer in range(layers):
        rows = slice(layer * directions, (layer + 1) * directions)
        layer_hx = [state[rows] for state in states]
        layer_params = params[layer * per_layer : (layer + 1) * per_layer]
        hidden = layer_hx if isinstance(hx, (list, tuple)) else layer_hx[0]
        result = func(output, hidden, layer_params, has_biases, 1, 0.0, train, both, first)
        output = result[0]
        for collected, state in zip(finals, result[1:], strict=True):
            collected.append(state)
        if layer < layers - 1:
            output = output * _cpu_dropout_mask(output, p)
    return (output, *(torch.cat(collected) for collected in finals))


def _attention_with_cpu_dropout(query, key, value, attn_mask=None, dropout_p=0.0,
                                is_causal=False, scale=None, enable_gqa=False):  # fmt: skip
    """Scaled dot-product attention as the CPU's math kernel computes it, mask drawn on the CPU."""
    scale = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    if enable_gqa:
        repeat = query.size(-3) // key.size(-3)
        key, value = key.repeat_interleave(repeat, -3), value.repeat_interleave(repeat, -3)
    weights = query @ key.transpose(-2, -1) * scale
    if is_causal:
        allowed = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool, device=query.device)
        weights = weights.masked_fill(~allowed.tril(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            weights = weights.masked_fill(~attn_mask, float("-inf"))
        else:
            weights = weights + attn_mask
    weights = weights.softmax(-1)
    return (weights * _cpu_dropout_mask(weights, dropout_p)) @ value


class _NoMode:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def host_random():
    return HostRandom() if device_kind() == "xla" else _NoMode()
