"""SGLang: its log lines (`logs`, `diagnosis`), its flags (`flags`) and EAGLE-3 draft checks (`preflight`)."""
