"""What a traced program does, read off its jaxpr (for tests that count operations)."""


def random_ops(jaxpr, counts=None):
    """(primitive, key type) -> count of the key splits and draws in a jaxpr, sub-jaxprs included."""
    counts = {} if counts is None else counts
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("random_split", "random_bits", "random_fold_in"):
            op = (eqn.primitive.name, str(eqn.invars[0].aval.dtype))
            counts[op] = counts.get(op, 0) + 1
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                if hasattr(sub, "eqns"):
                    random_ops(sub, counts)
                elif hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
                    random_ops(sub.jaxpr, counts)
    return counts
