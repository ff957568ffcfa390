"""A single-file module with module-level state, so two loads can be told apart."""

CALLS: list[str] = []


def remember(item: str) -> list[str]:
    CALLS.append(item)
    return list(CALLS)
