"""The energy tile and the passport.md line: one text for one figure (docs/spec.md, "Number formats")."""

from trainmeter.energy.summary import card_line, energy_tile


def _section(**more):
    section = {"joules": 59_100.0, "kwh": 59_100.0 / 3.6e6, "source": "nvml_energy", "per": "token",
               "j_per_token": 0.0123456, "j_per_sample": None, "j_per_pflop": {}, "avg_watts": {"0": 591.4},
               "carbon": None}
    section.update(more)
    return section


def test_the_tile_and_the_card_line_print_joules_per_token_alike():
    tile = energy_tile(_section())
    assert tile["text"] == "0.01235 J/token" and tile["text"] in card_line(_section())
    assert tile["sub"] == "0.01642 kWh; 591 W avg/device; nvml_energy"


def test_the_card_line_scales_joules_and_keeps_a_declared_grid_intensity_as_given():
    carbon = {"gco2": 6.567, "grid_gco2_per_kwh": 400.0, "grid_source": "declared"}
    line = card_line(_section(carbon=carbon))
    assert line.startswith("- Energy: 0.01642 kWh (59.1 kJ, nvml_energy); 0.01235 J/token; avg 591 W per device")
    assert line.endswith("6.567 gCO2 at a declared 400 gCO2/kWh (declared)")
