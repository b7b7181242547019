"""Build the Hugging Face model a trial trains: pretrained by name, or from a config from scratch."""

from __future__ import annotations

from typing import Any, Optional

from cbs_ray.spec.errors import SpecError

__all__ = ["build_model", "check_buildable", "model_config", "parameter_count", "quiet_default_loss"]


def _auto_class(task: str):
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

    return {"sequence-classification": AutoModelForSequenceClassification,
            "seq2seq": AutoModelForSeq2SeqLM}.get(task, AutoModelForCausalLM)


def model_config(model: dict, task: str, *, vocab_size: int, num_labels: int, pad_id: int, max_seq_length: int):
    """The transformers config for ``model`` (a ``ModelSpec`` as a dict). Raises SpecError for an
    unknown model name or type."""
    from transformers import AutoConfig

    extra: dict[str, Any] = {"num_labels": num_labels} if task == "sequence-classification" else {}
    if num_labels > 1 and task == "sequence-classification":
        # What the model would set itself at its first forward with labels. Set up front, the config
        # does not change under torch.compile, whose guard on it would otherwise recompile the model.
        extra["problem_type"] = "single_label_classification"
    if model.get("name"):
        try:
            return AutoConfig.from_pretrained(model["name"], **extra)
        except Exception as e:
            raise SpecError(f"model.name: cannot load {model['name']!r} (not a local model directory, and "
                            f"not found on the hub): {str(e).splitlines()[0]}") from None
    keys = dict(model["config"])
    model_type = keys.pop("model_type")
    try:
        config = AutoConfig.for_model(model_type, **keys)
    except Exception as e:
        # transformers lists every model type it knows after "Should contain one of": kilobytes, not a line.
        reason = str(e).splitlines()[0].split(". Should contain one of")[0]
        raise SpecError(f"model.config: cannot build a {model_type!r} config: {reason}") from None
    config.vocab_size = vocab_size
    config.pad_token_id = pad_id
    if task == "seq2seq":
        # T5's convention, which its loss and generation follow: the decoder starts from the padding token.
        config.decoder_start_token_id = pad_id
    for key, value in extra.items():
        setattr(config, key, value)
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if positions is not None and positions < max_seq_length:
        raise SpecError(f"model.config: max_position_embeddings {positions} is shorter than "
                        f"data.max_seq_length {max_seq_length}")
    return config


def check_buildable(model: dict, task: str, config, *, fsdp_block_class: Optional[str] = None,
                    fsdp: bool = False) -> None:
    """Build the model on the meta device (no memory, no weights): a config transformers accepts can still fail
    here (hidden size not a multiple of the heads), and should, before Ray starts and every trial fails alike. A
    named model's config comes with its weights and is not checked, but with ``fsdp`` (``training.parallelism:
    fsdp``) its blocks are found on its meta copy (``sources.blocks.check_fsdp_plan``)."""
    import torch

    if model.get("name") and not fsdp:
        return
    try:
        with torch.device("meta"):
            built = _auto_class(task).from_config(config)
    except Exception as e:
        raise SpecError(f"model.config: cannot build the model: {str(e).splitlines()[0]}") from None
    if fsdp:
        from cbs_ray.sources.blocks import check_fsdp_plan  # (torch: loaded here, not for a dry run's plan)

        check_fsdp_plan(built, fsdp_block_class)


def parameter_count(task: str, config) -> int:
    """The parameters of the model ``config`` builds, counted on the meta device (no memory, no weights); tied
    weights (GPT-2's embedding and output) once, as ``model.parameters()`` yields them."""
    import torch

    with torch.device("meta"):
        built = _auto_class(task).from_config(config)
    return sum(p.numel() for p in built.parameters())


def build_model(model: dict, task: str, config):
    """Instantiate the model: weights from the hub/local path for a named model, random otherwise."""
    auto = _auto_class(task)
    if model.get("name"):
        return quiet_default_loss(auto.from_pretrained(model["name"], config=config))
    return quiet_default_loss(auto.from_config(config))


def quiet_default_loss(model):
    """``model`` with its ``loss_type`` set to ``ForCausalLM`` where transformers left it None (a class name that
    names no loss, e.g. ``GPT2LMHeadModel``). That is the loss transformers falls back to then, so nothing
    changes but its warning ("`loss_type=None` was set in the config but it is unrecognized"): logged once per
    process (``logger.warning_once`` in ``PreTrainedModel.loss_function``), i.e. once in every trial."""
    if getattr(model, "loss_type", "") is None:
        model.loss_type = "ForCausalLM"
    return model
