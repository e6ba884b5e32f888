"""transformers' own common model tests against every public model class of the package.

``ModelTesterMixin`` (transformers' ``tests/test_modeling_common.py``) and ``ConfigTester``
(``tests/test_configuration_common.py``), of the source distribution of the INSTALLED transformers version, run
against ``CondenserModel``, ``CondenserForPreTraining``, ``CoCondenserForPreTraining``, ``TiteModel`` and
``TiteForPreTraining`` (the tiny ``late`` and ``staggered`` presets) and ``InfusedDualEncoderModel``, with
``ModelTester`` classes written here the way transformers' BERT test writes them. The two files are not in the
wheel: ``python tests/transformers_common/fetch.py`` (``.ci/run`` runs it) keeps them in the user cache; this
module reads them from there, uses no network, and skips, naming that command, without them. The files the
sdist lacks and that they import are stand-ins (``tests/transformers_common/stand_ins.py``).

Every test turned off here carries its reason, about the architecture, as transformers' own tests of models
that differ from BERT do (its Funnel Transformer test, for one).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types
import unittest
from unittest import mock

import pytest
import torch
from transformers.models.auto import modeling_auto
from transformers.testing_utils import require_torch, torch_device
from transformers_common import fetch, stand_ins

from dense_encoders import (
    CoCondenserForPreTraining,
    CondenserConfig,
    CondenserForPreTraining,
    CondenserModel,
    InfusedDualEncoderConfig,
    InfusedDualEncoderModel,
    TiteConfig,
    TiteForPreTraining,
    TiteModel,
)
from dense_encoders.models.tite.presets import TINY_PRESETS, tite_preset

COMMON_PACKAGE = "transformers_common_tests"  # the name the sdist's tests/ folder is imported under


def import_common_tests():
    """transformers' ``test_modeling_common`` and ``test_configuration_common``, imported from the cache as
    modules of one package (they import their siblings relatively), the stand-ins registered under the module
    names they stand for; or a skip naming the command that fetches them."""
    pytest.importorskip("parameterized", reason="transformers' common tests use parameterized, which the test extra "
                                                "installs: pip install -e '.[test]'")
    folder = fetch.sources_folder()
    if not fetch.is_fetched(folder):
        pytest.skip(f"needs transformers' common model tests, not in its wheel: run `{fetch.COMMAND}` once (pip "
                    f"downloads the transformers source distribution and keeps them in {folder})",
                    allow_module_level=True)
    if COMMON_PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(COMMON_PACKAGE, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[COMMON_PACKAGE] = package
        spec.loader.exec_module(package)
        for dotted, names in stand_ins.STANDS_FOR.items():
            parent = f"{COMMON_PACKAGE}.{dotted.split('.')[0]}"
            sys.modules.setdefault(parent, types.ModuleType(parent))
            module = types.ModuleType(f"{COMMON_PACKAGE}.{dotted}", stand_ins.__doc__)
            module.__dict__.update({name: getattr(stand_ins, name) for name in names})
            sys.modules[module.__name__] = module
    return (importlib.import_module(f"{COMMON_PACKAGE}.test_modeling_common"),
            importlib.import_module(f"{COMMON_PACKAGE}.test_configuration_common"))


modeling_common, configuration_common = import_common_tests()
ModelTesterMixin = modeling_common.ModelTesterMixin
ConfigTester = configuration_common.ConfigTester
ids_tensor, random_attention_mask = modeling_common.ids_tensor, modeling_common.random_attention_mask

# the models' StrictLoadingMixin (the rule in checkpoints/weights.py), on purpose:
STRICT_LOADING = ("strict loading refuses a checkpoint that lacks weights (one line naming allow_missing_weights=True) "
                  "instead of initialising them at random; this test empties the checkpoint and expects a load")


def check_config_at_berts_width(test, config_class, width_key="hidden_size", divisible_width=48):
    """``ConfigTester.run_common_tests`` at BERT's tester settings, but for one case turned off: our configs check
    that the heads divide the width when they are built, and refuse BERT's ``hidden_size=37`` with the default 12
    heads (``BertConfig`` takes it, and its model fails at the first forward). That refusal is checked here, and
    the common config tests run at the nearest width the default heads divide (48), the other settings as given."""
    with test.assertRaisesRegex(ValueError, "not divisible"):
        config_class(**test.config_tester.inputs_dict)
    settings = {**test.config_tester.inputs_dict, width_key: divisible_width}
    ConfigTester(test, config_class=config_class, **settings).run_common_tests()


class DenseEncodersModelTest:
    """What our ``ModelTesterMixin`` tests share.

    ``turned_off``: test name (or a ``parameterized`` family's name) -> the one-line reason, about the architecture,
    why transformers' common test does not apply to this model; such a test is skipped with "turned off: reason".

    transformers' models are listed by name in ``modeling_auto``'s tables, which the mixin reads to tell a base
    model (no loss: the training tests pass it over) from a pre-training head; ours are registered with the Auto
    classes instead, which those tables do not see. Each test lists the tested classes there while it runs, as an
    in-tree model is listed. Pre-training heads get labels where the mixin asks for them, as BERT's test gives them.
    """

    base_model_class: type
    pretraining_classes: tuple[type, ...] = ()
    # test_cpu_offload / test_disk_offload / test_model_parallelism load with a GPU budget of these shares of the
    # model (the first is the disk test's): in our tiny BERT-shaped models the embeddings (an unsplit module) are
    # over 80 % of the weights, so under 0.85 the whole model lands on the CPU and nothing is split (transformers'
    # own tests tune the shares per model alike)
    model_split_percents = [0.5, 0.85, 0.9]
    takes_labels = True  # the pre-training heads' ``labels`` (MLM targets)
    turned_off: dict[str, str] = {}

    def setUp(self):
        for name, reason in self.turned_off.items():
            if re.fullmatch(rf"{name}(_\d+_\w+)?", self._testMethodName):
                self.skipTest(f"turned off: {reason}")
        model_type = self.base_model_class.config_class.model_type
        for table, names in ((modeling_auto.MODEL_MAPPING_NAMES, self.base_model_class.__name__),
                             (modeling_auto.MODEL_FOR_PRETRAINING_MAPPING_NAMES,
                              tuple(cls.__name__ for cls in self.pretraining_classes))):
            if names:
                patcher = mock.patch.dict(table, {model_type: names})
                patcher.start()
                self.addCleanup(patcher.stop)
        super().setUp()

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class in self.pretraining_classes and self.takes_labels:
            inputs_dict["labels"] = torch.zeros((self.model_tester.batch_size, self.model_tester.seq_length),
                                                dtype=torch.long, device=torch_device)
        return inputs_dict


# ---------------------------------------------------------------------------- Condenser and coCondenser


class CondenserModelTester:
    """A 2-layer Condenser (head of one layer reading layer 1), as transformers' BertModelTester sizes BERT."""

    def __init__(self, parent, batch_size=13, seq_length=7, is_training=True, use_input_mask=True,
                 use_token_type_ids=True, use_labels=True, vocab_size=99, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=37, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=16,
                 initializer_range=0.02, skip_from=1, n_head_layers=1):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.use_input_mask = use_input_mask
        self.use_token_type_ids = use_token_type_ids
        self.use_labels = use_labels
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.skip_from = skip_from
        self.n_head_layers = n_head_layers

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        input_mask = random_attention_mask([self.batch_size, self.seq_length]) if self.use_input_mask else None
        token_type_ids = (ids_tensor([self.batch_size, self.seq_length], self.type_vocab_size)
                          if self.use_token_type_ids else None)
        token_labels = None
        if self.use_labels:  # MLM targets: the original token at about a third of the positions, -100 elsewhere
            chosen = ids_tensor([self.batch_size, self.seq_length], 3) == 0
            token_labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
        return self.get_config(), input_ids, token_type_ids, input_mask, token_labels

    def get_config(self):
        return CondenserConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, intermediate_size=self.intermediate_size,
            hidden_act=self.hidden_act, hidden_dropout_prob=self.hidden_dropout_prob,
            attention_probs_dropout_prob=self.attention_probs_dropout_prob,
            max_position_embeddings=self.max_position_embeddings, type_vocab_size=self.type_vocab_size,
            initializer_range=self.initializer_range, skip_from=self.skip_from, n_head_layers=self.n_head_layers,
        )

    def create_and_check_model(self, config, input_ids, token_type_ids, input_mask, token_labels):
        model = CondenserModel(config=config).to(torch_device).eval()
        result = model(input_ids, attention_mask=input_mask, token_type_ids=token_type_ids)
        result = model(input_ids, token_type_ids=token_type_ids)
        result = model(input_ids)
        self.parent.assertEqual(result.last_hidden_state.shape, (self.batch_size, self.seq_length, self.hidden_size))
        self.parent.assertEqual(result.pooler_output.shape, (self.batch_size, self.hidden_size))
        torch.testing.assert_close(result.pooler_output, result.last_hidden_state[:, 0])

    def create_and_check_for_pretraining(self, config, input_ids, token_type_ids, input_mask, token_labels,
                                         model_class=CondenserForPreTraining):
        model = model_class(config=config).to(torch_device).eval()
        result = model(input_ids, attention_mask=input_mask, token_type_ids=token_type_ids, labels=token_labels)
        self.parent.assertEqual(result.loss.shape, ())
        self.parent.assertEqual(result.pooler_output.shape, (self.batch_size, self.hidden_size))
        expected = result.head_mlm_loss + result.late_mlm_loss
        if model_class is CoCondenserForPreTraining:
            expected = expected + result.contrastive_loss
        torch.testing.assert_close(result.loss, expected)

    def prepare_config_and_inputs_for_common(self):
        config, input_ids, token_type_ids, input_mask, _ = self.prepare_config_and_inputs()
        return config, {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": input_mask}


@require_torch
class CondenserModelTest(DenseEncodersModelTest, ModelTesterMixin, unittest.TestCase):
    all_model_classes = (CondenserModel, CondenserForPreTraining)
    base_model_class = CondenserModel
    pretraining_classes = (CondenserForPreTraining,)
    turned_off = {"test_model_weights_reload_no_missing_tied_weights": STRICT_LOADING}

    def setUp(self):
        super().setUp()
        self.model_tester = CondenserModelTester(self)
        self.config_tester = ConfigTester(self, config_class=CondenserConfig, hidden_size=37)

    def test_config(self):
        check_config_at_berts_width(self, CondenserConfig)

    def test_model(self):
        self.model_tester.create_and_check_model(*self.model_tester.prepare_config_and_inputs())

    def test_for_pretraining(self):
        self.model_tester.create_and_check_for_pretraining(*self.model_tester.prepare_config_and_inputs())


@require_torch
class CoCondenserModelTest(DenseEncodersModelTest, ModelTesterMixin, unittest.TestCase):
    all_model_classes = (CoCondenserForPreTraining,)
    base_model_class = CondenserModel
    pretraining_classes = (CoCondenserForPreTraining,)
    # (CondenserForPreTraining, the same network without the span loss, runs both of the first two)
    turned_off = {
        "test_batching_equivalence": "the span contrastive loss pairs each row with its sibling (row i ^ 1): one row "
                                     "alone has no sibling and is refused",
        "test_eager_matches_sdpa_inference": "the span contrastive loss pairs each row with its sibling (row i ^ 1): "
                                             "the test's batches of 7 rows are refused",
        "test_model_weights_reload_no_missing_tied_weights": STRICT_LOADING,
    }

    def setUp(self):
        super().setUp()
        # coCondenser's batches hold two spans of each document, [d1s1, d1s2, d2s1, d2s2, ...]: an even batch
        self.model_tester = CondenserModelTester(self, batch_size=12)
        self.config_tester = ConfigTester(self, config_class=CondenserConfig, hidden_size=37)

    def test_config(self):
        check_config_at_berts_width(self, CondenserConfig)

    def test_for_pretraining(self):
        self.model_tester.create_and_check_for_pretraining(*self.model_tester.prepare_config_and_inputs(),
                                                           model_class=CoCondenserForPreTraining)


# ---------------------------------------------------------------------------- TITE


class TiteModelTester:
    """A tiny TITE preset (16 positions pooled to one vector) at BertModelTester's settings: its batch, sequence
    length, vocabulary and random attention masks (``random_attention_mask``: the first token kept, each other
    one at random, so the longest text is often shorter than the input). The presets' width (32) and heads (4) are
    BERT's tester's; their layer count is the schedule's (``test_num_layers_is_small`` says why)."""

    def __init__(self, parent, preset, batch_size=13, seq_length=7, is_training=True, use_input_mask=True,
                 vocab_size=99, hidden_dropout_prob=0.1):
        self.parent = parent
        self.preset = preset
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.use_input_mask = use_input_mask
        self.vocab_size = vocab_size
        self.hidden_dropout_prob = hidden_dropout_prob
        # with output_hidden_states, each layer's states at its own length come with their mask (hidden_states_masks)
        self.num_hidden_states_types = 2
        settings = TINY_PRESETS[preset]
        self.num_hidden_layers = settings["num_hidden_layers"]
        self.hidden_size = settings["hidden_sizes"]
        self.num_attention_heads = settings["num_attention_heads"]

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        input_mask = random_attention_mask([self.batch_size, self.seq_length]) if self.use_input_mask else None
        return self.get_config(), input_ids, input_mask

    def get_config(self):
        return tite_preset(self.preset, vocab_size=self.vocab_size, hidden_dropout_prob=self.hidden_dropout_prob)

    def create_and_check_model(self, config, input_ids, input_mask):
        model = TiteModel(config=config).to(torch_device).eval()
        result = model(input_ids, attention_mask=input_mask)
        result = model(input_ids)
        self.parent.assertEqual(result.last_hidden_state.shape, (self.batch_size, 1, self.hidden_size))
        self.parent.assertEqual(result.pooler_output.shape, (self.batch_size, self.hidden_size))

    def create_and_check_for_pretraining(self, config, input_ids, input_mask):
        model = TiteForPreTraining(config=config).to(torch_device).eval()
        result = model(input_ids, attention_mask=input_mask)
        self.parent.assertEqual(result.loss.shape, ())
        torch.testing.assert_close(result.loss, result.mae_loss + result.bow_loss)
        self.parent.assertEqual(result.pooler_output.shape, (self.batch_size, self.hidden_size))

    def prepare_config_and_inputs_for_common(self):
        config, input_ids, input_mask = self.prepare_config_and_inputs()
        return config, {"input_ids": input_ids, "attention_mask": input_mask}


class TiteModelTestBase(DenseEncodersModelTest, ModelTesterMixin):
    all_model_classes = (TiteModel, TiteForPreTraining)
    base_model_class = TiteModel
    pretraining_classes = (TiteForPreTraining,)
    takes_labels = False  # its losses read the input tokens: it needs no labels
    turned_off = {
        "test_num_layers_is_small": "TITE pools 16 positions to one vector, each k = 2 layer halving the length: "
                                    "the tiny late / staggered presets need 5 / 6 layers (Funnel's test is allowed 5)",
        "test_model_weights_reload_no_missing_tied_weights": STRICT_LOADING,
    }
    preset: str

    def setUp(self):
        super().setUp()
        self.model_tester = TiteModelTester(self, self.preset)
        # TITE's width is per layer, ``hidden_sizes`` (``hidden_size`` reads the last layer's; the config keeps the
        # list of one width per layer): BERT's 37 there, with the non-default values the other keys are tested at
        layers = TiteConfig().num_hidden_layers
        self.config_tester = ConfigTester(self, config_class=TiteConfig, vocab_size=99, pooling_location="post",
                                          hidden_sizes=[37] * layers)

    def test_config(self):
        check_config_at_berts_width(self, TiteConfig, width_key="hidden_sizes",
                                    divisible_width=[48] * TiteConfig().num_hidden_layers)

    def test_model(self):
        self.model_tester.create_and_check_model(*self.model_tester.prepare_config_and_inputs())

    def test_for_pretraining(self):
        self.model_tester.create_and_check_for_pretraining(*self.model_tester.prepare_config_and_inputs())


@require_torch
class TiteLateModelTest(TiteModelTestBase, unittest.TestCase):
    preset = "tiny-tite-2-late"


@require_torch
class TiteStaggeredModelTest(TiteModelTestBase, unittest.TestCase):
    preset = "tiny-tite-2-staggered"


# ---------------------------------------------------------------------------- cross-encoder-infused dual encoder


class InfusedDualEncoderModelTester(CondenserModelTester):
    """DE-2-CE's shape (one copied layer, one new), at BertModelTester's sizes."""

    def get_config(self):
        return InfusedDualEncoderConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, num_copied_layers=1, num_new_layers=1,
            num_attention_heads=self.num_attention_heads, intermediate_size=self.intermediate_size,
            hidden_act=self.hidden_act, hidden_dropout_prob=self.hidden_dropout_prob,
            attention_probs_dropout_prob=self.attention_probs_dropout_prob,
            max_position_embeddings=self.max_position_embeddings, type_vocab_size=self.type_vocab_size,
            initializer_range=self.initializer_range,
        )

    def create_and_check_model(self, config, input_ids, token_type_ids, input_mask, token_labels):
        model = InfusedDualEncoderModel(config=config).to(torch_device).eval()
        result = model(input_ids, attention_mask=input_mask, token_type_ids=token_type_ids)
        self.parent.assertEqual(result.last_hidden_state.shape, (self.batch_size, self.seq_length, self.hidden_size))
        mask = input_mask[..., None].to(result.last_hidden_state.dtype)
        torch.testing.assert_close(result.pooler_output, (result.last_hidden_state * mask).sum(1) / mask.sum(1))


@require_torch
class InfusedDualEncoderModelTest(DenseEncodersModelTest, ModelTesterMixin, unittest.TestCase):
    all_model_classes = (InfusedDualEncoderModel,)
    base_model_class = InfusedDualEncoderModel
    turned_off = {"test_model_weights_reload_no_missing_tied_weights": STRICT_LOADING}

    def setUp(self):
        super().setUp()
        self.model_tester = InfusedDualEncoderModelTester(self)
        self.config_tester = ConfigTester(self, config_class=InfusedDualEncoderConfig, hidden_size=37)

    def test_config(self):
        check_config_at_berts_width(self, InfusedDualEncoderConfig)

    def test_model(self):
        self.model_tester.create_and_check_model(*self.model_tester.prepare_config_and_inputs())
