import json

import trainmeter as tm
from trainmeter.record.passport import render_markdown, throughput_derivations


def test_throughput_derivations_can_be_redone_by_hand():
    ds = {d.name: d for d in throughput_derivations(tokens=1000, steps=10, train_s=4.0, elapsed_s=5.0, unit="tokens")}
    assert ds["train_tokens_per_s"].value == 250 and ds["train_tokens_per_s"].formula == "tokens / train_s"
    assert ds["session_tokens_per_s"].value == 200 and ds["seconds_per_step"].value == 0.4
    assert {i.provenance for i in ds["train_tokens_per_s"].inputs} == {"counted", "measured"}


def test_passport_json_has_documented_keys_and_markdown_is_readable(run_root):
    with tm.monitor(run_dir=run_root, name="pp") as m:
        tm.emit(train_loss=2.0, val_loss=2.5)
    p = json.loads((m.run_dir / "passport.json").read_text())
    assert p["series"]["val_loss"] == {"last": 2.5, "min": 2.5, "max": 2.5, "count": 1, "last_step": 0}
    assert {d["name"] for d in p["derivations"]} >= {"train_tokens_per_s", "session_tokens_per_s"}
    md = render_markdown(p)
    assert "Status: **completed**" in md and "val_loss: last 2.5" in md
    assert "host" not in json.dumps(p["environment"]).lower()
