from tests.browser.jupyter_harness import X
