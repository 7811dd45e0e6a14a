"""GPT-2 against transformers: directories load both ways, logits agree, greedy decoding picks the same tokens."""

import json

import pytest
import torch
import transformers

from bertkit.cli import main
from bertkit.models.gpt.configuration import GPT2Config
from bertkit.models.gpt.modeling import GPT2LMHeadModel, GPT2Model
from bertkit.pipelines.lm import generate_text
from bertkit.tokenizer import BertTokenizer
from tolerance import assert_close
from weights import randomise

# Random configurations of several sizes and options (all ids inside the vocabulary).
CONFIGS = {
    "tiny": dict(vocab_size=50, n_positions=32, n_embd=16, n_layer=2, n_head=4),
    "wider-gelu-inner": dict(vocab_size=99, n_positions=40, n_embd=32, n_layer=3, n_head=2, n_inner=48,
                             activation_function="gelu"),
    "untied-relu-layer-scaled": dict(vocab_size=61, n_positions=24, n_embd=24, n_layer=2, n_head=3,
                                     activation_function="relu", tie_word_embeddings=False,
                                     scale_attn_by_inverse_layer_idx=True),
    "unscaled-eps": dict(vocab_size=40, n_positions=16, n_embd=8, n_layer=1, n_head=2, scale_attn_weights=False,
                         layer_norm_epsilon=1e-3),
}


def _config(name: str, **extra) -> dict:
    return dict(CONFIGS[name], bos_token_id=1, eos_token_id=2, pad_token_id=0, **extra)


def _batches(vocab_size: int):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab_size, (3, 9), generator=g)
    right = torch.ones_like(ids)
    right[1, 6:] = 0
    right[2, 3:] = 0
    left = right.flip(1)
    return ids, {"no mask": None, "right padding": right, "left padding": left}


def _assert_logits_agree(ours, theirs, vocab_size: int) -> None:
    ids, masks = _batches(vocab_size)
    for what, mask in masks.items():
        with torch.no_grad():
            a = ours(ids, attention_mask=mask).logits
            b = theirs(ids, attention_mask=mask).logits
        keep = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()  # padding rows are noise
        assert_close(a[keep], b[keep], msg=what)


@pytest.mark.parametrize("name", CONFIGS)
def test_transformers_directory_loads_and_matches(tmp_path, name):
    torch.manual_seed(0)
    theirs = randomise(transformers.GPT2LMHeadModel(transformers.GPT2Config(**_config(name))))
    theirs.save_pretrained(tmp_path)
    ours = GPT2LMHeadModel.from_pretrained(tmp_path)
    assert ours.loaded_but_unused == []
    assert (ours.lm_head.weight is ours.transformer.wte.weight) == ours.config.tie_word_embeddings
    _assert_logits_agree(ours, theirs, ours.config.vocab_size)


@pytest.mark.parametrize("name", CONFIGS)
def test_bertkit_directory_loads_in_transformers_and_matches(tmp_path, name):
    torch.manual_seed(0)
    ours = randomise(GPT2LMHeadModel(GPT2Config(**_config(name))))
    ours.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "gpt2" and saved["architectures"] == ["GPT2LMHeadModel"]
    assert "architectures" not in vars(ours.config)  # saving does not change the model's config
    theirs, info = transformers.GPT2LMHeadModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    _assert_logits_agree(ours, theirs.eval(), ours.config.vocab_size)


def test_older_checkpoints_with_the_causal_mask_buffers_load(tmp_path):
    """Some GPT-2 files carry the causal mask as `attn.bias` / `attn.masked_bias` buffers: not weights."""
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    theirs = randomise(transformers.GPT2LMHeadModel(transformers.GPT2Config(**_config("tiny"))))
    theirs.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    for i in range(2):
        state[f"transformer.h.{i}.attn.bias"] = torch.ones(1, 1, 32, 32).tril()
        state[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(state, tmp_path / "model.safetensors")
    ours = GPT2LMHeadModel.from_pretrained(tmp_path)
    _assert_logits_agree(ours, theirs, 50)


def test_bare_model_and_lm_checkpoints_load_into_each_other(tmp_path):
    torch.manual_seed(0)
    theirs = randomise(transformers.GPT2LMHeadModel(transformers.GPT2Config(**_config("tiny"))))
    theirs.transformer.save_pretrained(tmp_path / "bare")
    theirs.save_pretrained(tmp_path / "lm")
    ids, _ = _batches(50)
    bare = GPT2Model.from_pretrained(tmp_path / "lm")                 # drops the (tied) head, keeps transformer.*
    with torch.no_grad():
        assert_close(bare(ids).last_hidden_state, theirs.transformer(ids).last_hidden_state)
        lm = GPT2LMHeadModel.from_pretrained(tmp_path / "bare")       # gains the prefix; the tied head comes along
        assert_close(lm(ids).logits, theirs(ids).logits)


@pytest.mark.parametrize("name", ["tiny", "untied-relu-layer-scaled"])
def test_greedy_generation_picks_transformers_tokens(tmp_path, name):
    torch.manual_seed(0)
    theirs = randomise(transformers.GPT2LMHeadModel(transformers.GPT2Config(**_config(name))), seed=5)
    theirs.save_pretrained(tmp_path)
    ours = GPT2LMHeadModel.from_pretrained(tmp_path)
    prompt = torch.randint(3, ours.config.vocab_size, (2, 4), generator=torch.Generator().manual_seed(2))
    length = ours.config.n_positions - 4
    for eos in (None, 2):
        expected = theirs.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=length,
                                   do_sample=False, num_beams=1, eos_token_id=eos, pad_token_id=0)
        assert len(set(expected[:, 4:].flatten().tolist())) > 3    # not one token repeated
        for use_cache in (True, False):
            got = ours.generate(prompt, max_new_tokens=length, eos_token_id=eos, pad_token_id=0, use_cache=use_cache)
            assert got.tolist() == expected.tolist()


def test_without_a_padding_token_finished_rows_repeat_eos_as_in_transformers(tmp_path):
    torch.manual_seed(0)
    theirs = randomise(transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIGS["tiny"])), seed=5)
    prompts = torch.arange(3, 3 + 40).view(10, 4) % 50
    free = theirs.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=12, do_sample=False,
                           eos_token_id=None, pad_token_id=0)
    eos = int(free[:, 4:].flatten().mode().values)     # a token some rows produce: it will end them early
    theirs.config.bos_token_id = theirs.config.eos_token_id = eos
    theirs.config.pad_token_id = None                  # GPT-2's way: no padding token
    theirs.save_pretrained(tmp_path)
    ours = GPT2LMHeadModel.from_pretrained(tmp_path)
    assert ours.config.pad_token_id is None and ours.config.eos_token_id == eos
    got = ours.generate(prompts, max_new_tokens=12)
    expected = theirs.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=12, do_sample=False,
                               eos_token_id=eos, pad_token_id=eos)
    assert got.tolist() == expected.tolist()
    assert any(row[-2:] == [eos, eos] for row in got.tolist())   # a row finished early and was padded with eos


def test_post_ln_and_sinusoidal_models_are_saved_as_not_loadable_by_transformers(tmp_path):
    for options in (dict(normalize_before=False), dict(position_embedding_type="sinusoidal")):
        model = GPT2LMHeadModel(GPT2Config(**_config("tiny", **options)))
        model.save_pretrained(tmp_path)
        assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "bertkit-gpt2"
        with pytest.raises(ValueError, match="bertkit-gpt2"):
            transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
        loaded = GPT2LMHeadModel.from_pretrained(tmp_path)
        assert loaded.config == model.config


def _word_vocab(directory, size: int) -> BertTokenizer:
    """A vocab.txt of `size` entries: BERT's special tokens, then distinct lowercase words."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words += [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(size - len(words))]
    (directory / "vocab.txt").write_text("\n".join(words) + "\n")
    return BertTokenizer.from_pretrained(directory)


def test_cli_generate_on_a_transformers_directory_reproduces_its_greedy_tokens(tmp_path, capsys):
    torch.manual_seed(0)
    config = transformers.GPT2Config(**dict(CONFIGS["wider-gelu-inner"], bos_token_id=2, eos_token_id=3,
                                            pad_token_id=0))
    theirs = randomise(transformers.GPT2LMHeadModel(config), seed=8)
    theirs.save_pretrained(tmp_path)
    tokenizer = _word_vocab(tmp_path, config.vocab_size)
    prompt = "waa wbc wcd"
    ids = [tokenizer.cls_token_id] + tokenizer(prompt, add_special_tokens=False)["input_ids"]
    expected = theirs.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                               max_new_tokens=20, do_sample=False, eos_token_id=tokenizer.sep_token_id,
                               pad_token_id=tokenizer.pad_token_id)[0].tolist()
    assert len(set(expected[len(ids):])) > 4                 # a real continuation, not one token repeated
    expected_text = tokenizer.decode(expected, skip_special_tokens=True)
    assert main(["generate", "--model", str(tmp_path), "--greedy", "--max-new-tokens", "20", prompt]) == 0
    assert capsys.readouterr().out.strip() == expected_text  # distinct whole words: same text, same tokens
    ours = GPT2LMHeadModel.from_pretrained(tmp_path)
    assert generate_text(ours, tokenizer, prompt, 20) == expected_text


# ---- the NumPy reference ---------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [dict(), dict(tie_word_embeddings=False, activation_function="relu"),
                                     dict(normalize_before=False, position_embedding_type="sinusoidal"),
                                     dict(scale_attn_weights=False, scale_attn_by_inverse_layer_idx=True)])
def test_numpy_gpt2_matches_the_torch_model(tmp_path, options):
    from bertkit.models.reference import NumpyGPT2

    torch.manual_seed(0)
    ours = randomise(GPT2LMHeadModel(GPT2Config(**_config("wider-gelu-inner", **options))))
    ours.save_pretrained(tmp_path)
    reference = NumpyGPT2.from_pretrained(tmp_path)
    ids, masks = _batches(ours.config.vocab_size)
    for mask in masks.values():
        with torch.no_grad():
            want = ours(ids, attention_mask=mask).logits
        got = torch.from_numpy(reference(ids.numpy(), None if mask is None else mask.numpy()))
        keep = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
        assert_close(got[keep], want[keep])


def test_numpy_gpt2_reads_the_earlier_gpt_format():
    """bertkit's earlier GPT checkpoints load into the NumPy reference through the same renaming."""
    from pathlib import Path

    from safetensors.numpy import load_file

    from bertkit.models.reference import NumpyGPT2

    for name in ("GPTForCausalLM", "GPTForCausalLM-post-ln-sinusoidal-untied"):
        directory = Path(__file__).parent / "fixtures" / "checkpoints" / name
        recorded = load_file(str(directory / "expected.safetensors"))
        got = NumpyGPT2.from_pretrained(directory)(recorded["input.input_ids"], recorded["input.attention_mask"])
        keep = recorded["input.attention_mask"].astype(bool)
        assert_close(got[keep], recorded["output.logits"][keep], msg=name)


def test_transformers_directory_with_default_special_ids_and_a_small_vocabulary_loads(tmp_path):
    """transformers' GPT2Config keeps GPT-2's bos/eos 50256 whatever the vocabulary; its model loads and runs, and so
    must bertkit's: a warning says generation cannot start from or stop at them, the logits agree."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=16, n_layer=2, n_head=4)
    assert config.bos_token_id == config.eos_token_id == 50256
    theirs = randomise(transformers.GPT2LMHeadModel(config))
    theirs.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="bos_token_id 50256 and eos_token_id 50256 are outside the vocab"):
        ours = GPT2LMHeadModel.from_pretrained(tmp_path)
    _assert_logits_agree(ours, theirs, 300)
    prompt = torch.tensor([[5, 6, 7]])
    out = ours.generate(prompt, max_new_tokens=4)  # eos 50256 can never be produced: runs to max_new_tokens
    assert out.shape == (1, 7) and int(out.max()) < 300
    with pytest.raises(ValueError, match="give a prompt"):
        ours.generate(max_new_tokens=4)
