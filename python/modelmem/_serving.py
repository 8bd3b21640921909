"""modelmem.plan_serving()'s result: the serving plan as a typed object (ServingPlan)."""

import functools

from . import _modelmem


class ServingPlan(dict):
    """The serving plan of a decoder LLM (what `modelmem serve MODEL --json` prints): every field
    both as an attribute (p.kv_tokens) and as a key (p["kv_tokens"]), so it also compares equal
    to the JSON the CLI writes. Nested values (kv_layers, engines, engine_formulas) are dicts."""

    __slots__ = ()

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"ServingPlan has no field {name!r}") from None

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self))

    def __repr__(self):
        return (f"<modelmem.ServingPlan {self.get('model')}: {self.get('kv_tokens')} KV tokens, "
                f"{self.get('max_sequences')} sequences of {self.get('context')} tokens>")


@functools.wraps(_modelmem.plan_serving)
def plan_serving(*args, **kwargs):
    return ServingPlan(_modelmem.plan_serving(*args, **kwargs))
