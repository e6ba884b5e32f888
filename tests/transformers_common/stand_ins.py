"""Stand-ins for the files of transformers' tests/ folder that its source distribution lacks and that
``test_modeling_common.py`` / ``test_configuration_common.py`` import (``tests/test_transformers_common.py``
registers each under the module name it stands for)."""


# stand-in for tests/exporters/test_export.py (ExportTesterMixin): its export tests are not in the sdist
class ExportTesterMixin:
    pass


# stand-in for tests/generation/test_utils.py (GenerationTesterMixin): none of our models generates text
class GenerationTesterMixin:
    pass


# stand-in for tests/utils/test_configuration_utils.py: PreTrainedConfig's own arguments, none at its default
config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "is_encoder_decoder": True,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}

# the module of transformers' tests/ each stand-in stands for -> its names there
STANDS_FOR = {
    "exporters.test_export": ("ExportTesterMixin",),
    "generation.test_utils": ("GenerationTesterMixin",),
    "utils.test_configuration_utils": ("config_common_kwargs",),
}
