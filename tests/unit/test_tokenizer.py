from seqrl.models.tokenizer import CHAT_TEMPLATE, EOS, build_char_tokenizer
from seqrl.types import STEP_SEP


def test_round_trip_of_house_format_and_ascii():
    tok = build_char_tokenizer()
    text = "<think>47+85: 7+5=12" + STEP_SEP + "4+8+1=13</think><answer>132</answer>\n  ~!{}"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    # markers and the step separator are one token each
    for marker in ("<think>", "</think>", "<answer>", "</answer>", STEP_SEP):
        assert len(tok.encode(marker, add_special_tokens=False)) == 1, marker


def test_three_newlines_split_into_blank_line_then_newline():
    tok = build_char_tokenizer()
    ids = tok.encode("a\n\n\nb", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids) == ["a", "\n\n", "\n", "b"]


def test_unknown_characters_map_to_unk_not_crash():
    tok = build_char_tokenizer()
    ids = tok.encode("é\t", add_special_tokens=False)
    assert ids == [tok.unk_token_id, tok.unk_token_id]


def test_chat_template_and_special_ids(tmp_path):
    tok = build_char_tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": "1+2="}], tokenize=False, add_generation_prompt=True)
    assert text == "<|user|>1+2=<|assistant|>"
    assert tok.chat_template == CHAT_TEMPLATE
    assert tok.eos_token == EOS and tok.pad_token_id != tok.eos_token_id
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    again = AutoTokenizer.from_pretrained(tmp_path)
    sample = "<think>1+1=2</think><answer>2</answer>"
    assert again.encode(sample) == tok.encode(sample)
    assert again.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True) == "<|user|>x<|assistant|>"
