"""Transformers backend: a hub id or local folder (or a .gguf file), optionally with a LoRA adapter on top; chat
template, streaming via a thread."""

from __future__ import annotations

import os
import queue
import threading
from typing import Any

from models.base import ChatModel, ChatStream, ContinuationScore, Finish, GenerationOptions, Message
from models.errors import ContextOverflowError, GenerationError, ModelUnavailableError

# Used when a tokenizer ships without a chat template (rare; our tiny test models and GGUF files may).
FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def split_gguf(source: str) -> tuple[str, str | None]:
    """'dir/model.Q4.gguf' or 'owner/repo/model.gguf' -> (folder or repo, gguf file name)."""
    if source.endswith(".gguf"):
        folder, name = os.path.split(source)
        return folder or ".", name
    return source, None


def use_chat_template(tokenizer: Any) -> str:
    """The tokenizer's chat template; FALLBACK_TEMPLATE is set on it where it has none."""
    if not tokenizer.chat_template:
        tokenizer.chat_template = FALLBACK_TEMPLATE
    return str(tokenizer.chat_template)


def chat_prompt(tokenizer: Any, messages: list[Message]) -> str:
    """The text the model answers: the messages in its chat template, ending with the assistant's turn opening.
    `keem train-updater` builds its training prompts with this and `token_ids`, so they are what this backend
    sends."""
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def token_ids(tokenizer: Any, text: str) -> list[int]:
    """The text's token ids as this backend counts and sends them (no special tokens added)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """The token ids that end an answer: the generation config's, else the tokenizer's."""
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    eos = tokenizer.eos_token_id if eos is None else eos
    return set(eos) if isinstance(eos, (list, tuple)) else ({eos} if eos is not None else set())


def context_window(model: Any, max_context: int = 8192) -> int:
    """The model's positions, at most `max_context`."""
    positions = getattr(model.config, "max_position_embeddings", None) or max_context
    return min(int(positions), max_context)


def four_bit_config(missing: str) -> Any:
    """How every 4-bit load quantizes: nf4 with double quantization, bf16 compute (QLoRA's recipe), so an adapter
    trained on a 4-bit base (keem train-updater --4bit) runs on the same base in the app. `missing`: the error
    to raise when bitsandbytes is not installed."""
    import torch

    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError as exc:
        raise ModelUnavailableError(missing) from exc
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )


def cannot_load(source: str, exc: BaseException) -> ModelUnavailableError:
    return ModelUnavailableError(
        f"cannot load '{source}' with transformers ({str(exc).splitlines()[0]}); "
        "check the hub id or path, or that the hub is reachable (HF_TOKEN for gated models)"
    )


def load_tokenizer(source: str) -> Any:
    """The tokenizer of `source` (a folder, a hub id, or a .gguf file in either), with a chat template
    (FALLBACK_TEMPLATE where it has none)."""
    from transformers import AutoTokenizer

    folder, gguf_file = split_gguf(source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **({"gguf_file": gguf_file} if gguf_file else {}))
    except (OSError, ValueError) as exc:
        raise cannot_load(source, exc) from exc
    use_chat_template(tokenizer)
    return tokenizer


def load_causal_lm(
    source: str, device: str, *, four_bit: bool = False, missing_4bit: str = "", device_map: Any = "auto"
) -> Any:
    """The weights of `source` (a folder, a hub id, or a .gguf file in either) on `device`: bf16 on CUDA, nf4
    4-bit there with `four_bit` (placed by `device_map`; `missing_4bit` is the error without bitsandbytes),
    float32 on CPU. The one loader of the app's backend and of `keem train-updater`."""
    import torch
    from transformers import AutoModelForCausalLM

    folder, gguf_file = split_gguf(source)
    kwargs: dict[str, Any] = {"dtype": torch.bfloat16 if device == "cuda" else torch.float32}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    if four_bit and device == "cuda":
        kwargs["quantization_config"] = four_bit_config(missing_4bit)
        kwargs["device_map"] = device_map
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except (OSError, ValueError) as exc:
        raise cannot_load(source, exc) from exc
    if "device_map" not in kwargs:
        model.to(device)  # type: ignore[arg-type]  # transformers types the wrapped .to without self
    return model


class TransformersChatModel(ChatModel):
    """bf16 on CUDA (optionally 4-bit), float32 on CPU; the tokenizer's chat template; streaming.

    `adapter`: a LoRA adapter folder (what `keem train-updater` writes) or hub id, applied with peft on top of
    `source` and merged into its weights (kept separate on a 4-bit base, which cannot be merged exactly).
    """

    def __init__(
        self,
        source: str,
        *,
        spec: str | None = None,
        load_in_4bit: bool = False,
        device: str | None = None,
        max_context: int = 8192,
        adapter: str | None = None,
    ):
        try:
            import torch
            import transformers  # noqa: F401  (what load_tokenizer and load_causal_lm need)
        except ImportError as exc:  # pragma: no cover - the base install has them
            raise ModelUnavailableError(f"transformers/torch missing ({exc}); run `make install`") from exc
        self.spec = spec or f"hf:{source}"
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = load_tokenizer(source)
        self.model = load_causal_lm(
            source,
            self.device,
            four_bit=load_in_4bit,
            missing_4bit="4-bit loading needs bitsandbytes: pip install -e '.[gpu]'",
        )
        if adapter:
            self.model = _with_adapter(self.model, adapter, merge=not load_in_4bit)
        self.model.eval()
        self.context_window = context_window(self.model, max_context)
        self.description = (
            f"{source}"
            + (f" + LoRA {adapter}" if adapter else "")
            + f" on {self.device}"
            + (" (4-bit)" if load_in_4bit else "")
        )
        self._torch = torch

    # -- token helpers -------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(token_ids(self.tokenizer, text))

    def _prompt_ids(self, messages: list[Message], room: int) -> Any:
        """Token ids of the chat prompt, dropping the oldest non-system turns until it fits `room` tokens."""
        msgs = list(messages)
        while True:
            prompt = token_ids(self.tokenizer, chat_prompt(self.tokenizer, msgs))
            ids = self._torch.tensor([prompt], dtype=self._torch.long)
            if ids.shape[1] <= room:
                return ids.to(self.model.device)
            droppable = [i for i, m in enumerate(msgs[:-1]) if m["role"] != "system"]
            if not droppable:
                raise ContextOverflowError(
                    f"the prompt needs {ids.shape[1]} tokens but model '{self.spec}' has room for {room}; "
                    "shorten the message or lower the memory budget (KEEM_TOKEN_BUDGET)"
                )
            del msgs[droppable[0]]

    # -- protocol ------------------------------------------------------------------------------
    def stream(self, messages: list[Message], options: GenerationOptions = GenerationOptions()) -> ChatStream:
        """Text pieces as they are decoded; returns the Finish ("length" when max_new_tokens ran out before EOS)."""
        from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

        room = max(self.context_window - options.max_new_tokens, 16)
        input_ids = self._prompt_ids(messages, room)
        streamer = TextIteratorStreamer(
            self.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=options.timeout_s
        )
        stop = threading.Event()

        class _Stop(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs) -> bool:  # type: ignore[override]
                return stop.is_set()

        gen_kwargs: dict[str, Any] = dict(
            input_ids=input_ids,
            attention_mask=self._torch.ones_like(input_ids),
            streamer=streamer,
            max_new_tokens=options.max_new_tokens,
            stopping_criteria=StoppingCriteriaList([_Stop()]),
            pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
        )
        if options.temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=options.temperature, top_p=options.top_p)
        else:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        errors: list[BaseException] = []
        outputs: list[Any] = []

        def run() -> None:
            try:
                with self._torch.inference_mode():
                    outputs.append(self.model.generate(**gen_kwargs))
            except BaseException as exc:  # surfaced to the consumer below
                errors.append(exc)
                streamer.end()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            for piece in streamer:
                if piece:
                    yield piece
        except queue.Empty as exc:
            raise GenerationError(
                f"model '{self.spec}' produced nothing for {options.timeout_s:.0f} s; "
                "raise the timeout or use a smaller model"
            ) from exc
        finally:
            stop.set()
        thread.join(timeout=5)
        if errors:
            raise GenerationError(f"generation with '{self.spec}' failed: {errors[0]}") from errors[0]
        new = outputs[0][0, input_ids.shape[1] :].tolist() if outputs else []
        return Finish(self._finish(new, options.max_new_tokens), int(input_ids.shape[1]), len(new))

    def _finish(self, new_ids: list[int], max_new_tokens: int) -> str:
        """'length' when generation used its whole budget without ending on an end-of-sequence token."""
        ends = eos_ids(self.model, self.tokenizer)
        return "length" if len(new_ids) >= max_new_tokens and (not new_ids or new_ids[-1] not in ends) else "stop"

    def score(self, context: list[Message], continuation: str) -> ContinuationScore:
        torch = self._torch
        cont = self.tokenizer(continuation, add_special_tokens=False, return_tensors="pt")["input_ids"]
        cont = cont.to(self.model.device)
        prompt = self._prompt_ids(context, max(self.context_window - cont.shape[1], 1))
        ids = torch.cat([prompt, cont], dim=1)
        with torch.inference_mode():
            logits = self.model(input_ids=ids).logits[0, prompt.shape[1] - 1 : -1].float()
        logprobs = torch.log_softmax(logits, dim=-1).gather(1, cont[0].unsqueeze(1)).squeeze(1)
        return ContinuationScore(logprob=float(logprobs.sum()), n_tokens=int(cont.shape[1]))


def _with_adapter(model: Any, adapter: str, *, merge: bool) -> Any:
    """The model with the LoRA adapter in `adapter` (a folder or hub id) applied; merged into it when `merge`."""
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise ModelUnavailableError(
            "LoRA adapters (hf:<base>+lora:<dir>) need peft: pip install -e '.[train]'"
        ) from exc
    if os.path.isdir(adapter) and not os.path.isfile(os.path.join(adapter, "adapter_config.json")):
        raise ModelUnavailableError(
            f"'{adapter}' holds no LoRA adapter (no adapter_config.json); give the --out folder of a finished "
            "`keem train-updater` run, or a merged model folder as hf:<folder>"
        )
    try:
        model = PeftModel.from_pretrained(model, adapter)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelUnavailableError(
            f"cannot apply the LoRA adapter '{adapter}' ({str(exc).splitlines()[0]}); check the path, and that "
            "it was trained on this base model"
        ) from exc
    return model.merge_and_unload() if merge else model
