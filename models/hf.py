"""Transformers backend: a hub id or local folder (or a .gguf file), optionally with a LoRA adapter on top; chat
template, streaming via a thread; the KV cache of recent calls is reused for the prompt prefix they share."""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass
from typing import Any

from models.base import (
    ChatModel,
    ChatStream,
    ContinuationScore,
    Finish,
    GenerationOptions,
    Message,
    whole_characters,
)
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


KV_CACHE_TOKENS = 16384  # tokens of KV cache kept between calls, all sessions together (0: no reuse)
MIN_SHARED = 16  # a kept cache is taken only for a prefix this long: a shorter one is not worth another's cache


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many leading token ids `a` and `b` have in common."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass
class Kept:
    ids: list[int]  # the tokens whose keys and values `cache` holds
    cache: Any  # a transformers DynamicCache


class PrefixCache:
    """The KV caches of recent calls, at most `max_tokens` tokens in all, least recently used dropped first.

    A call takes the kept cache that shares the longest prefix with its prompt, cropped to that prefix, and owns
    it while it generates: two calls never hold one cache, so concurrent users cannot corrupt each other's (each
    session's next turn finds its own, since its prompt extends the last one). The call gives it back with what it
    computed. Memory: for a Llama, 2 x layers x kv heads x head dim x bytes per value, per token.
    """

    def __init__(self, max_tokens: int = KV_CACHE_TOKENS):
        self.max_tokens = max_tokens
        self._kept: list[Kept] = []  # least recently used first
        self._lock = threading.Lock()

    def take(self, ids: list[int]) -> tuple[Any | None, int]:
        """(a cache holding the first n tokens of `ids`, n); (None, 0) when none shares MIN_SHARED tokens.
        At least the last token of `ids` is left to compute, so there are logits to start from."""
        with self._lock:
            best, n = None, 0
            for kept in self._kept:
                m = shared_prefix(kept.ids, ids)
                if m > n:
                    best, n = kept, m
            n = min(n, len(ids) - 1)
            if best is None or n < MIN_SHARED:
                return None, 0
            self._kept.remove(best)
        extra = best.cache.get_seq_length() - n
        if extra > 0:
            if not all(getattr(layer, "is_croppable", False) for layer in getattr(best.cache, "layers", [None])):
                return None, 0  # a cache that cannot be cut back (some sliding-window layouts): start afresh
            best.cache.crop(-extra)
        return best.cache, n

    def give(self, ids: list[int], cache: Any) -> None:
        """Keep `cache` (holding the keys and values of `ids`) for later calls."""
        if self.max_tokens <= 0 or len(ids) > self.max_tokens:
            return
        with self._lock:
            self._kept.append(Kept(ids, cache))
            while sum(len(k.ids) for k in self._kept) > self.max_tokens:
                self._kept.pop(0)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    @property
    def tokens(self) -> int:
        with self._lock:
            return sum(len(k.ids) for k in self._kept)


class TransformersChatModel(ChatModel):
    """bf16 on CUDA (optionally 4-bit), float32 on CPU; the tokenizer's chat template; streaming.

    `adapter`: a LoRA adapter folder (what `keem train-updater` writes) or hub id, applied with peft on top of
    `source` and merged into its weights (kept separate on a 4-bit base, which cannot be merged exactly).
    `kv_cache_tokens`: KV cache kept between calls (PrefixCache): a session's next turn, whose prompt extends the
    last one's (chatbot/session.py), computes only its new tokens; 0 turns reuse off.
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
        kv_cache_tokens: int = KV_CACHE_TOKENS,
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
            + ("; KV cache reused across turns" if kv_cache_tokens > 0 else "")
        )
        self.kv_cache = PrefixCache(kv_cache_tokens)
        self._torch = torch

    @property
    def reuse_note(self) -> str:
        """What the banner says about KV reuse."""
        if self.kv_cache.max_tokens <= 0:
            return "KV cache not reused"
        return f"KV cache reused across turns (prefix match, up to {self.kv_cache.max_tokens:,} tokens kept)"

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

        from transformers import DynamicCache

        prompt = input_ids[0].tolist()
        cache, cached = self.kv_cache.take(prompt) if self.kv_cache.max_tokens > 0 else (None, 0)
        if cache is None:
            cache = DynamicCache(config=self.model.config)
        gen_kwargs: dict[str, Any] = dict(
            input_ids=input_ids,
            cache=cache,  # transformers 5.x (was past_key_values)
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
            yield from whole_characters(streamer)  # a reply cut mid-syllable ends before it, not in '\ufffd'
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
        if outputs and not thread.is_alive():  # keep what was computed: the prompt and the reply so far
            self.kv_cache.give((prompt + new)[: cache.get_seq_length()], cache)
        return Finish(self._finish(new, options.max_new_tokens), len(prompt), len(new), cached)

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
