"""sentence-transformers: SentenceTransformerTrainer with MultipleNegativesRankingLoss on a tiny BERT built from a
config (a word-level vocabulary written in the test, nothing downloaded). Its loss module is called with a list of
feature dicts (anchor, positive): every column's token ids count (docs/spec.md section 2, "The batch rule")."""

from __future__ import annotations

import random
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
datasets = pytest.importorskip("datasets")

import trainmeter as tm  # noqa: E402
from tests.field.conftest import passport, printed_by_us, within  # noqa: E402

ROWS, BATCH, VOCAB = 24, 4, 40
EVAL_SLEEP_S = 0.5  # inside each evaluation (the evaluator's call), 2 evaluations


def _text(rng: random.Random, longest: int) -> str:
    return " ".join(f"w{rng.randrange(VOCAB)}" for _ in range(rng.randrange(2, longest)))


def _model_dir(tmp_path):
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path / "tiny-bert"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                 *(f"w{i}" for i in range(VOCAB))]))
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB + 5, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    return folder


class Seen:
    """The test's own count, a forward pre-hook on the loss module: every column's input_ids; and the losses."""

    def __init__(self, loss):
        self.tokens, self.losses = 0, []
        loss.register_forward_pre_hook(self.pre)
        loss.register_forward_hook(self.post)

    def pre(self, module, args):
        if torch.is_grad_enabled():
            self.tokens += sum(column["input_ids"].numel() for column in args[0])

    def post(self, module, args, out):
        if torch.is_grad_enabled():
            self.losses.append(out.detach().clone())


def _trainer(tmp_path, out: str, sleeps: bool = False, evaluate: bool = False):
    import transformers
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers import SentenceTransformerTrainingArguments as Arguments
    from sentence_transformers.sentence_transformer import losses, modules
    from sentence_transformers.sentence_transformer.evaluation import SentenceEvaluator

    transformers.set_seed(0)
    word = modules.Transformer(str(tmp_path / "tiny-bert"))
    model = SentenceTransformer(modules=[word, modules.Pooling(16)], device="cpu")
    rng = random.Random(0)
    rows = {"anchor": [_text(rng, 9) for _ in range(ROWS)], "positive": [_text(rng, 14) for _ in range(ROWS)]}
    loss = losses.MultipleNegativesRankingLoss(model)

    class Slow(SentenceEvaluator):  # the inner model's evaluation: it encodes, under no_grad
        def __call__(self, model, output_path=None, epoch=-1, steps=-1):
            model.encode(rows["anchor"][:4])
            if sleeps:  # after its first call of the inner model: inside the evaluation however it is seen
                time.sleep(EVAL_SLEEP_S)
            return {"slow": 0.0}

    args = Arguments(output_dir=str(tmp_path / out), num_train_epochs=1, per_device_train_batch_size=BATCH,
                     report_to=[], logging_steps=1, save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0,
                     eval_strategy="steps" if evaluate else "no", eval_steps=3 if evaluate else None)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_dict(rows),
                                         loss=loss, evaluator=Slow() if evaluate else None)
    return trainer, Seen(loss)


def test_sentence_transformers_counts_every_column_s_tokens_and_changes_no_loss(tmp_path, printed):
    _model_dir(tmp_path)
    bare_trainer, bare = _trainer(tmp_path, "bare")
    with printed() as bare_printed:
        bare_trainer.train()
    trainer, seen = _trainer(tmp_path, "ours")
    with printed() as ours, tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.train()
    p = passport(m)
    steps = ROWS // BATCH
    assert m.steps == steps == trainer.state.global_step
    assert m.tokens == seen.tokens == bare.tokens and m.token_unit == "tokens"  # anchor and positive columns
    assert len(seen.losses) == steps and all(torch.equal(a, b) for a, b in zip(seen.losses, bare.losses, strict=True))
    info = p["series_info"]["tokens_per_step"]  # the Trainer's own batch: a flat dict of every column's ids
    assert info["provenance"] == "counted" and info["source"] == "hf training_step inputs", info
    assert printed_by_us(bare_printed, ours) == [] and p["warnings"] == []


def test_sentence_transformers_evaluation_of_the_inner_model_is_booked_as_eval(tmp_path, printed):
    _model_dir(tmp_path)
    bare_trainer, _ = _trainer(tmp_path, "bare", evaluate=True)
    started_s = time.perf_counter()
    bare_trainer.train()
    bare_s = time.perf_counter() - started_s
    trainer, seen = _trainer(tmp_path, "ours", sleeps=True, evaluate=True)
    with tm.monitor(run_dir=tmp_path / "runs", interval_s=3600) as m:
        trainer.train()
    p = passport(m)
    assert m.tokens == seen.tokens
    assert within(p["phases_s"].get("eval", 0.0), 2 * EVAL_SLEEP_S, bare_s), (p["phases_s"], bare_s)
