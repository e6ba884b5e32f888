"""The papers' recipes: every file is valid for its command, its values reach the parsed arguments, the
command line and --config override it, the scheduler it names is the paper's, and the card names it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel

from dense_encoders import cli
from dense_encoders.cli.arguments import parse
from dense_encoders.cli.recipes import markdown_table
from dense_encoders.hub import model_card
from dense_encoders.recipes import load_recipe, load_recipes, read_recipe, recipe_differences, recipe_names

RECIPES_PAGE = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"
SHIPPED = ("ce-infusion", "cocondenser", "condenser", "menon-m3se", "menon-sce", "tite-fine-tuning",
           "tite-pretraining")


def parsed_values(command: str, argv: list[str]) -> dict:
    """What a subcommand's command line parses to, as one flag-name -> value mapping."""
    name, _, architecture = command.partition(" ")
    parser = cli.PARSERS[name]()
    if architecture:
        parser.set_defaults(architecture=architecture)
    parsed = parse(parser, argv, command=command)
    if isinstance(parsed, tuple) and len(parsed) == 2:  # (setup, TrainingArguments)
        setup, args = parsed
        return {**args.to_dict(), **vars(setup)}
    if isinstance(parsed, tuple):  # (InfusionArguments,)
        (parsed,) = parsed
    return vars(parsed)


def required_flags(command: str, tmp_path: Path) -> list[str]:
    if command.startswith("pretrain"):
        return ["--output-dir", str(tmp_path / "run"), "--use-cpu"]  # use_cpu: bf16 recipes parse on any machine
    if command == "distill":
        return ["--student", "s", "--train-file", "t.jsonl", "--output-dir", str(tmp_path / "run"), "--use-cpu"]
    return ["--cross-encoder", "ce", "--train-data", "d", "--output-dir", str(tmp_path / "run")]


def test_the_package_ships_one_recipe_per_paper_setting():
    assert recipe_names() == sorted(SHIPPED)
    commands = {recipe.name: recipe.command for recipe in load_recipes()}
    assert commands == {"condenser": "pretrain condenser", "cocondenser": "pretrain cocondenser",
                        "tite-pretraining": "pretrain tite", "tite-fine-tuning": "distill", "menon-m3se": "distill",
                        "menon-sce": "distill", "ce-infusion": "infuse"}
    for recipe in load_recipes():
        assert recipe.paper and recipe.summary and all(setting.source.strip() for setting in recipe.settings.values())
        assert not re.search(r"\d{3}_[0-9a-f]{16}", str(recipe)), "papers are cited by title, never by file name"


@pytest.mark.parametrize("name", SHIPPED)
def test_every_recipe_value_reaches_the_parsed_arguments(name, tmp_path):
    recipe = load_recipe(name)
    values = parsed_values(recipe.command, ["--recipe", name, *required_flags(recipe.command, tmp_path)])
    assert set(recipe.settings) <= set(values)
    assert recipe_differences(recipe, values) == {}
    assert values["recipe"] == name


def test_the_papers_values_are_pinned():
    """The values the issue names, read from the papers (TITE Sec. 4.1; Menon et al. App. B; the MNRL script)."""
    tite = load_recipe("tite-pretraining").values()
    assert (tite["learning_rate"], tite["warmup_steps"], tite["max_steps"], tite["max_seq_length"]) == (1e-4, 3000,
                                                                                                          200000, 512)
    assert (tite["lr_scheduler_type"], tite["lr_scheduler_kwargs"], tite["bf16"]) == ("cosine_with_min_lr",
                                                                                      {"min_lr_rate": 0.02}, True)
    fine = load_recipe("tite-fine-tuning").values()
    assert (fine["losses"], fine["infonce_theta"], fine["documents_per_query"], fine["learning_rate"]) == (
        "margin_mse+kl+infonce", 3.0, 8, 1e-5)
    assert (fine["query_max_length"], fine["document_max_length"], fine["max_steps"]) == (32, 512, 50000)
    infusion = load_recipe("ce-infusion").values()
    assert (infusion["batch_size"], infusion["learning_rate"], infusion["epochs"], infusion["max_length"],
            infusion["warmup_steps"]) == (64, 2e-5, 10, 300, 1000)
    for name, loss in (("menon-m3se", "m3se"), ("menon-sce", "sce")):
        menon = load_recipe(name).values()
        assert (menon["losses"], menon["documents_per_query"], menon["sampling"], menon["learning_rate"],
                menon["per_device_train_batch_size"]) == (loss, 20, "top", 2.8e-5, 128)
    assert load_recipe("menon-sce").values()["sce_temperature"] == 1.0
    for name in ("condenser", "cocondenser"):
        condenser = load_recipe(name).values()
        assert (condenser["learning_rate"], condenser["warmup_steps"], condenser["weight_decay"],
                condenser["skip_from"], condenser["n_head_layers"]) == (1e-4, 0.1, 0.01, 6, 2)


def test_the_tite_schedule_is_cosine_down_to_two_percent(tmp_path):
    """transformers' own scheduler from the recipe's arguments, against the schedule evaluated by hand:
    linear warm-up over 3k steps, then min + (peak - min) * (1 + cos(pi * progress)) / 2 with min = 2 % of peak."""
    from transformers import get_scheduler

    values = parsed_values("pretrain tite",
                           ["--recipe", "tite-pretraining", *required_flags("pretrain tite", tmp_path)])
    peak, warmup, total = values["learning_rate"], int(values["warmup_steps"]), values["max_steps"]
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    scheduler = get_scheduler(values["lr_scheduler_type"], optimizer, num_warmup_steps=warmup,
                              num_training_steps=total, scheduler_specific_kwargs=values["lr_scheduler_kwargs"])

    def by_hand(step: int) -> float:
        if step < warmup:
            return peak * step / warmup
        progress = (step - warmup) / (total - warmup)
        return 0.02 * peak + (peak - 0.02 * peak) * 0.5 * (1 + math.cos(math.pi * progress))

    for step in (0, 1500, 3000, 50000, 101500, 199999, 200000):
        assert peak * scheduler.lr_lambdas[0](step) == pytest.approx(by_hand(step), rel=1e-12, abs=1e-18)
    assert by_hand(total) == pytest.approx(2e-6)


def test_config_file_and_command_line_override_the_recipe(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("recipe: tite-fine-tuning\nlearning_rate: 3.0e-5\nmax_steps: 7\n")
    values = parsed_values("distill", ["--config", str(config), "--max-steps", "9",
                                       *required_flags("distill", tmp_path)])
    assert values["learning_rate"] == 3e-5  # the config file over the recipe
    assert values["max_steps"] == 9  # the command line over both
    assert (values["documents_per_query"], values["query_max_length"], values["losses"]) == (8, 32,
                                                                                             "margin_mse+kl+infonce")
    changed = recipe_differences(load_recipe("tite-fine-tuning"), values)
    assert changed == {"learning_rate": (1e-5, 3e-5), "max_steps": (50000, 9)}
    explicit = parsed_values("distill", ["--recipe", "menon-m3se", "--documents-per-query", "5", "--sampling", "random",
                                         *required_flags("distill", tmp_path)])
    assert (explicit["documents_per_query"], explicit["sampling"], explicit["losses"]) == (5, "random", "m3se")


def test_a_recipe_for_another_command_or_an_unknown_one_is_refused(tmp_path, capsys):
    output = tmp_path / "run"
    assert cli.main(["pretrain", "condenser", "--recipe", "tite-pretraining", "--output-dir", str(output)]) == 2
    assert "recipe tite-pretraining is written for `dense-encoders pretrain tite`" in capsys.readouterr().err
    assert cli.main(["distill", "--recipe", "tite", "--student", "s", "--train-file", "t.jsonl"]) == 2
    error = capsys.readouterr().err
    assert "unknown recipe 'tite'" in error and "tite-fine-tuning" in error
    assert not output.exists()


def test_recipe_files_are_checked(tmp_path, capsys):
    bad = tmp_path / "mine.yaml"
    bad.write_text("command: distill\npaper: p\nsummary: s\nsettings:\n  learning_rate: 1.0e-5\n")
    with pytest.raises(ValueError, match=r"setting 'learning_rate' must be \{value: \.\.\., source"):
        read_recipe(bad)
    bad.write_text("command: distill\npaper: p\nsummary: s\nsettings:\n  no_such_flag: {value: 1, source: x}\n")
    assert cli.main(["distill", "--recipe", str(bad), "--student", "s", "--train-file", "t.jsonl"]) == 2
    assert "recipe mine: 'no_such_flag' is not a flag of dense-encoders distill" in capsys.readouterr().err
    mine = tmp_path / "short.yaml"
    mine.write_text("command: distill\npaper: p\nsummary: s\nsettings:\n  max_steps: {value: 3, source: my notes}\n")
    assert parsed_values("distill", ["--recipe", str(mine), *required_flags("distill", tmp_path)])["max_steps"] == 3


def test_recipes_command_lists_every_value_with_its_source(capsys):
    assert cli.main(["recipes"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in SHIPPED)
    assert cli.main(["recipes", "tite-pretraining"]) == 0
    shown = capsys.readouterr().out
    recipe = load_recipe("tite-pretraining")
    for key, setting in recipe.settings.items():
        line = next(line for line in shown.splitlines() if line.startswith(key + " "))
        assert setting.source in line
    assert re.search(r"^max_seq_length\s+512\s+128\s", shown, re.M)  # the recipe's value, then the package default
    assert "dense-encoders pretrain tite --recipe tite-pretraining" in shown


def test_docs_recipes_table_is_the_generated_one():
    assert markdown_table() in RECIPES_PAGE.read_text(), "regenerate it with `dense-encoders recipes --markdown`"


# ---- end to end: the run uses the recipe and the card names it ------------------------------------------


def test_pretrain_with_a_recipe_trains_with_it_and_the_card_says_so(tmp_path, small_corpus, capsys):
    output = tmp_path / "tite"
    argv = ["pretrain", "tite", "--recipe", "tite-pretraining", "--corpus", str(small_corpus), "--output-dir",
            str(output), "--preset", "tiny-tite-2-late", "--max-seq-length", "16", "--per-device-train-batch-size",
            "2", "--max-steps", "2", "--bf16", "false", "--report-to", "none", "--disable-tqdm", "true"]
    assert cli.main(argv) == 0
    assert "trained with the recipe tite-pretraining (TITE: Token-Independent Text Encoder" in capsys.readouterr().err
    args = json.loads((output / "training_args.json").read_text())
    assert (args["lr_scheduler_type"], args["lr_scheduler_kwargs"], args["warmup_steps"], args["learning_rate"]) == (
        "cosine_with_min_lr", {"min_lr_rate": 0.02}, 3000, 1e-4)
    assert json.loads((output / "config.json").read_text())["attention_probs_dropout_prob"] == 0.0
    card = (output / "README.md").read_text()
    line = next(line for line in card.splitlines() if line.startswith("- recipe: "))
    assert "`tite-pretraining`" in line and "TITE: Token-Independent Text Encoder" in line
    assert "max_steps 2 (recipe: 200000)" in line and "bf16 False (recipe: True)" in line
    assert "learning_rate" not in line  # not changed
    setup = json.loads((output / "pretraining_setup.json").read_text())
    (output / "pretraining_setup.json").write_text(json.dumps({**setup, "recipe": None}))
    assert "- recipe: none (the package defaults" in str(model_card(output))


def test_distill_with_and_without_a_recipe(tmp_path, tok, capsys):
    student = tmp_path / "student"
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config, add_pooling_layer=False).save_pretrained(student)
    tok.save_pretrained(student)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"query": f"query {i}", "documents": [f"document {i} {j}" for j in range(4)],
                                         "scores": [4.0 - j for j in range(4)]}) + "\n" for i in range(4)))

    def argv(output: Path, *recipe: str) -> list[str]:
        return ["distill", *recipe, "--student", str(student), "--train-file", str(train), "--pooling", "cls",
                "--output-dir", str(output), "--documents-per-query", "4", "--per-device-train-batch-size", "2",
                "--max-steps", "2", "--query-max-length", "8", "--document-max-length", "8", "--report-to", "none",
                "--disable-tqdm", "true"]

    with_recipe = tmp_path / "with-recipe"
    assert cli.main(argv(with_recipe, "--recipe", "tite-fine-tuning", "--bf16", "false")) == 0
    args = json.loads((with_recipe / "training_args.json").read_text())
    assert ((args["learning_rate"], args["warmup_steps"], args["lr_scheduler_type"])
            == (1e-5, 3000, "cosine_with_min_lr"))
    line = next(line for line in (with_recipe / "README.md").read_text().splitlines() if line.startswith("- recipe: "))
    assert "`tite-fine-tuning`" in line and "documents_per_query 4 (recipe: 8)" in line
    capsys.readouterr()
    defaults = tmp_path / "defaults"
    assert cli.main(argv(defaults)) == 0
    assert "trained without --recipe, with the package defaults" in capsys.readouterr().err
    assert "- recipe: none" in (defaults / "README.md").read_text()
    assert json.loads((defaults / "training_args.json").read_text())["lr_scheduler_type"] == "linear"


# ---- precision: what a recipe asks for runs as asked, or is refused with the fix -------------------------


@pytest.mark.parametrize("recipe", ["condenser", "cocondenser"])
def test_a_recipes_fp16_on_the_cpu_is_refused_and_the_advice_trains_in_bf16(recipe, tmp_path, tok, small_corpus,
                                                                            capsys):
    """fp16 mixed precision exists on GPUs only (accelerate trains in fp32 on the CPU): a recipe's --fp16 on a
    run that trains on the CPU is refused before anything is loaded, naming the recipe and the fixes; following
    the bf16 fix trains in bf16 on the CPU, and the records and the card say bf16."""
    backbone = tmp_path / "bert"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=64)).save_pretrained(backbone)
    tok.save_pretrained(backbone)
    output = tmp_path / "run"
    argv = ["pretrain", recipe, "--recipe", recipe, "--backbone", str(backbone), "--corpus", str(small_corpus),
            "--output-dir", str(output), "--skip-from", "1", "--n-head-layers", "1", "--max-seq-length", "16",
            "--per-device-train-batch-size", "2", "--max-steps", "2", "--report-to", "none", "--disable-tqdm", "true",
            "--use-cpu"]
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"dense-encoders pretrain: error: --fp16 (recipe {recipe}): fp16 mixed precision needs a "
                           "CUDA GPU, and this run trains on the CPU, where it would train in fp32: add --fp16 false "
                           "to train in fp32, or --fp16 false --bf16 --use_cpu to train in bf16 on the CPU")
    assert not output.exists()
    if recipe == "cocondenser":  # its training (span pairs) is pinned in test_pretraining; the refusal is the same
        return
    assert cli.main([*argv, "--fp16", "false", "--bf16"]) == 0
    assert json.loads((output / "training_environment.json").read_text())["precision"] == "bf16"
    card = (output / "README.md").read_text()
    assert "precision bf16" in card and "precision fp16" not in card


def test_bf16_without_a_bf16_gpu_names_use_cpu(tmp_path, capsys):
    """bf16 runs on the CPU with --use_cpu: without a GPU that has bf16, --bf16 alone (or a recipe's) is refused
    with that advice, not with 'needs a CUDA GPU'; with --use_cpu it parses."""
    from transformers.utils import is_torch_bf16_gpu_available

    if is_torch_bf16_gpu_available():
        pytest.skip("this machine has a GPU with bf16: --bf16 needs no --use_cpu here")
    base = ["pretrain", "tite", "--output-dir", str(tmp_path / "run")]
    for extra, origin in ((["--recipe", "tite-pretraining"], "--bf16 (recipe tite-pretraining)"),
                          (["--bf16"], "--bf16")):
        capsys.readouterr()
        assert cli.main([*base, *extra]) == 2
        assert capsys.readouterr().err.strip() == (
            f"dense-encoders pretrain: error: {origin}: there is no GPU with bf16 support here: add --use_cpu to "
            "train in bf16 on the CPU, or --bf16 false to train in fp32")
    values = parsed_values("pretrain tite", ["--recipe", "tite-pretraining", "--output-dir", str(tmp_path / "run"),
                                             "--use-cpu"])
    assert values["bf16"] is True and values["use_cpu"] is True


def test_the_records_state_the_precision_used():
    """fp16 on the CPU would train in fp32 (no autocast there): the records say fp32; bf16 runs on either device."""
    from types import SimpleNamespace

    from dense_encoders.trainer.records import training_precision

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert training_precision(SimpleNamespace(fp16=True, bf16=False, device=cpu)) == "fp32"
    assert training_precision(SimpleNamespace(fp16=True, bf16=False, device=cuda)) == "fp16"
    assert training_precision(SimpleNamespace(fp16=False, bf16=True, device=cpu)) == "bf16"
    assert training_precision(SimpleNamespace(fp16=False, bf16=False, device=cuda)) == "fp32"
