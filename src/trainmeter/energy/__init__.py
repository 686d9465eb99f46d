"""The energy wing: joules per token, sample and PFLOP, kWh and declared carbon (docs/spec.md section 13)."""
