"""The widget wing: the live anywidget sink, its wire, the static dashboard and replay (docs/spec.md section 12)."""
