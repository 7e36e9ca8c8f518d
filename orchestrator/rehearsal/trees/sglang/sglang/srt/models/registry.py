"""The model registry: every module in `sglang.srt.models` is imported and its `EntryClass` listed.

As in SGLang, a module that fails to import is only a warning (`Ignore import error when loading
...`): a model file broken by a patch shows up later as an unsupported architecture.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from functools import lru_cache

from sglang.srt.utils import release_at_least

logger = logging.getLogger(__name__)


@lru_cache()
def import_model_classes(package_name: str = "sglang.srt.models") -> dict:
    model_arch_name_to_cls = {}
    package = importlib.import_module(package_name)
    for _, name, ispkg in pkgutil.iter_modules(package.__path__, package_name + "."):
        if ispkg:
            continue
        try:
            module = importlib.import_module(name)
        except Exception as e:
            if release_at_least("0.5.9"):
                logger.warning(f"Ignore import error when loading {name}: {e}")
            else:
                logger.warning(f"Ignore import error when loading {name}. " f"{e}")
            continue
        if hasattr(module, "EntryClass"):
            entry = module.EntryClass
            for cls in entry if isinstance(entry, list) else [entry]:
                model_arch_name_to_cls[cls.__name__] = cls
    return model_arch_name_to_cls


class ModelRegistry:
    def __init__(self):
        self.models = import_model_classes()

    def resolve_model_cls(self, architectures: list[str]):
        for arch in architectures:
            if arch in self.models:
                return self.models[arch], arch
        raise ValueError(
            f"Model architectures {architectures} are not supported for now. "
            f"Supported architectures: {self.models.keys()}"
        )
