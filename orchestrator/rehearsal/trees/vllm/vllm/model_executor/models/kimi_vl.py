"""KimiVLForConditionalGeneration (rehearsal): no EAGLE-3 support, as in the real releases."""


class KimiVLForConditionalGeneration:
    pass
