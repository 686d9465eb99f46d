"""The compare table: one row per run, its numbers as the widget and passport.md print them."""

from trainmeter.comparison.figures import table_html, table_rows


def _passport(loss, steps, tokens_per_s, mfu):
    return {"status": "completed", "steps": steps, "tokens": 2_000_000,
            "series": {"train_loss": {"last": loss, "min": loss - 0.1}},
            "throughput": {"train_tokens_per_s": tokens_per_s},
            "compute": {"convention": "hf", "mfu": {"hf": mfu}}, "goodput": 0.9,
            "energy": {"j_per_token": None}, "environment": {}, "options": {}}


def test_the_table_prints_losses_steps_rates_and_shares_with_the_one_formatter():
    rows = table_rows(["a", "b"], [_passport(2.34567, 1_150, 850.4, 0.423), _passport(2.5, 1_100, 49_100.0, 0.4)])
    html = table_html(rows)
    for text in ("2.346", "2.246", "1,150", "1,100", "2.0M", "850", "49.1k", "42.3% (hf)", "90.0%"):
        assert f">{text}<" in html, text
    assert ">—<" in html  # J/token: missing
