"""The demo's end-to-end fixture files and the environment variables tests find them by.

    load("//testing:fixtures.bzl", "DEMO_FILES", "DEMO_FILES_ENV")

    cc_test(name = "foo_test", data = DEMO_FILES, env = DEMO_FILES_ENV, ...)

The test then reads getenv("LORA_A_PTE") and so on. Labels are Label() objects so that they still
resolve when an embedder loads this file as @edgeshare//testing:fixtures.bzl.
"""

# File written by //testing:demo_lora_files -> the environment variable holding its runfiles path.
_DEMO_FILE_ENV_NAMES = {
    "foundation.ptd": "FOUNDATION_PTD",
    "lora_a.pte": "LORA_A_PTE",
    "lora_a.forward.input0.npy": "LORA_A_INPUT",
    "lora_a.forward.output0.npy": "LORA_A_OUTPUT",
    "lora_b.pte": "LORA_B_PTE",
    "lora_b.forward.input0.npy": "LORA_B_INPUT",
    "lora_b.forward.output0.npy": "LORA_B_OUTPUT",
}

# The demo's two LoRA programs, their shared foundation.ptd, and the seeded inputs with torch-eager
# outputs: the `data` of a test.
DEMO_FILES = [Label("//testing:" + name) for name in _DEMO_FILE_ENV_NAMES]

# The matching `env` of a test: FOUNDATION_PTD, LORA_{A,B}_PTE, LORA_{A,B}_{INPUT,OUTPUT}.
DEMO_FILES_ENV = {
    env: "$(rootpath %s)" % Label("//testing:" + name)
    for name, env in _DEMO_FILE_ENV_NAMES.items()
}

# The generation fixture (//testing:generation_files: programs with a KV cache, swappable adapters,
# a prompt and transformers' tokens) as a test's `data` and `env`: tests find the files beside the
# path in GENERATION_EXPECTED_TXT (C++) or GENERATION_EXPECTED_JSON (Python).
GENERATION_FILES = [
    Label("//testing:generation/expected.json"),
    Label("//testing:generation/expected.txt"),
    Label("//testing:generation_files"),
]

GENERATION_FILES_ENV = {
    "GENERATION_EXPECTED_JSON": "$(rootpath %s)" % Label("//testing:generation/expected.json"),
    "GENERATION_EXPECTED_TXT": "$(rootpath %s)" % Label("//testing:generation/expected.txt"),
}

# The text fixture (//testing:text_files: a tiny Llama exported with its own tokenizer, chat
# template and transformers' expected outputs) beside the generation fixture, as a test's `data`
# and `env`: tests find the files beside TEXT_EXPECTED_JSON and GENERATION_EXPECTED_JSON.
TEXT_FILES = GENERATION_FILES + [
    Label("//testing:text/expected.json"),
    Label("//testing:text_files"),
]

TEXT_FILES_ENV = dict(
    GENERATION_FILES_ENV,
    TEXT_EXPECTED_JSON = "$(rootpath %s)" % Label("//testing:text/expected.json"),
)
