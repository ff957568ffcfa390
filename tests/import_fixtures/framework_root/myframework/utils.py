"""A framework utility its Megatron adapter imports by absolute name."""


def helper() -> str:
    return "helped by myframework.utils"
