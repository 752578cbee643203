"""Exports as build actions: a Hugging Face model's foundation and each LoRA adapter's program.

    load("@edgeshare//tools:defs.bzl", "edgeshare_adapter", "edgeshare_foundation")

    edgeshare_foundation(
        name = "foundation",
        hf_model = "//models/llama:files",   # config.json, *.safetensors, tokenizer files
        max_seq_len = 128,
        quantize = "int8",
    )

    edgeshare_adapter(name = "chat", adapter = "//adapters/chat:files", foundation = ":foundation")
    edgeshare_adapter(name = "code", adapter = "//adapters/code:files", foundation = ":foundation")

    cc_binary(name = "app", data = [":chat", ":code"], ...)

The foundation is one action: <name>/foundation.ptd, <name>/foundation.pte (the bare model), the
model's tokenizer files beside them, and <name>.index.json, the foundation's identity and entry
digests (a few kilobytes); its output groups "ptd", "pte" and "index" name one file each:

    filegroup(name = "foundation_ptd", srcs = [":foundation"], output_group = "ptd")

Each adapter is an action of its own writing <name>/<adapter>.pte; its
inputs are the model's files, the adapter's files, the options and the index, never the .ptd, so
adding or changing one adapter re-runs that adapter's action only, and the actions run anywhere
Bazel sends them (a remote executor needs the Python environment, CPU only). An adapter target's
runfiles hold its program and the foundation's .ptd.

Both run //tools:export_lora from the repository's Python environment. The adapters' programs are
byte for byte what one `export_lora --hf-model ... --adapter ...` process writes.
"""

EdgeshareFoundationInfo = provider(
    doc = "An exported foundation, for the adapters exported over it.",
    fields = {
        "flags": "list of str: the export options, as export_lora flags",
        "index": "File: the foundation's index (export_lora --foundation-index)",
        "model_dir": "str: the model directory's path (its config.json's folder)",
        "model_files": "depset of File: the model directory's files",
        "ptd": "File: foundation.ptd",
        "pte": "File: foundation.pte",
    },
)

# The files export_lora copies from the model directory into its output folder: the tokenizer's and
# generation_config.json (exir/tokenizer_files.py's TOKENIZER_FILE_NAMES).
_COPIED_MODEL_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
]

_CHAT_TEMPLATE_DIR = "additional_chat_templates/"

def _directory_of(files, marker, what, label):
    """The folder of the one file named `marker`; every file must lie under it."""
    found = [f for f in files if f.basename == marker]
    if len(found) != 1:
        fail("%s: %s must hold exactly one %s, found %d" % (label, what, marker, len(found)))
    directory = found[0].dirname
    for f in files:
        if not f.path.startswith(directory + "/"):
            fail("%s: %s file %s is not under %s's folder %s" % (label, what, f.path, marker, directory))
    return directory

def _flags(ctx):
    flags = [
        "--max-seq-len",
        str(ctx.attr.max_seq_len),
        "--quantize",
        ctx.attr.quantize,
        "--fc-weight-dtype",
        ctx.attr.fc_weight_dtype,
        "--adapter-dtype",
        ctx.attr.adapter_dtype,
        "--kv-dtype",
        ctx.attr.kv_dtype,
    ]
    if ctx.attr.group_size:
        flags.extend(["--group-size", str(ctx.attr.group_size)])
    if ctx.attr.full_logits:
        flags.append("--full-logits")
    return flags

def _edgeshare_foundation_impl(ctx):
    model_files = ctx.files.hf_model
    model_dir = _directory_of(model_files, "config.json", "hf_model", ctx.label)
    ptd = ctx.actions.declare_file(ctx.label.name + "/foundation.ptd")
    pte = ctx.actions.declare_file(ctx.label.name + "/foundation.pte")
    index = ctx.actions.declare_file(ctx.label.name + ".index.json")
    copied = []
    for f in model_files:
        relative = f.path[len(model_dir) + 1:]
        if relative in _COPIED_MODEL_FILES or relative.startswith(_CHAT_TEMPLATE_DIR):
            copied.append(ctx.actions.declare_file(ctx.label.name + "/" + relative))
    flags = _flags(ctx)
    args = ctx.actions.args()
    args.add("--hf-model", model_dir)
    args.add("--out", ptd.dirname)
    args.add("--foundation-index", index)
    args.add_all(flags)
    ctx.actions.run(
        executable = ctx.attr._exporter[DefaultInfo].files_to_run,
        arguments = [args],
        inputs = model_files + [ctx.file._requirements],
        outputs = [ptd, pte, index] + copied,
        # The shell environment a genrule gets (PATH, for the py_binary's interpreter); with
        # --incompatible_strict_action_env a fixed one, the same on every machine.
        use_default_shell_env = True,
        mnemonic = "EdgeshareExportFoundation",
        progress_message = "Exporting the foundation of %s" % ctx.label,
    )
    return [
        DefaultInfo(
            files = depset([ptd, pte] + copied),
            runfiles = ctx.runfiles(files = [ptd, pte] + copied),
        ),
        EdgeshareFoundationInfo(
            flags = flags,
            index = index,
            model_dir = model_dir,
            model_files = depset(model_files),
            ptd = ptd,
            pte = pte,
        ),
        # One file each, for a filegroup(output_group = ...) that $(rootpath) can name.
        OutputGroupInfo(
            index = depset([index]),
            ptd = depset([ptd]),
            pte = depset([pte]),
        ),
    ]

edgeshare_foundation = rule(
    implementation = _edgeshare_foundation_impl,
    doc = "A Hugging Face model's foundation.ptd and foundation.pte, exported by one action.",
    attrs = {
        "adapter_dtype": attr.string(
            default = "fp32",
            values = ["fp32", "fp16", "int8"],
            doc = "how the adapters exported over it store their weights (export_lora --adapter-dtype)",
        ),
        "fc_weight_dtype": attr.string(
            default = "fp32",
            values = ["fp32", "fp16"],
            doc = "stored fully connected weights of an unquantized foundation (--fc-weight-dtype)",
        ),
        "full_logits": attr.bool(doc = "forward_cached returns every new position's logits (--full-logits)"),
        "group_size": attr.int(doc = "with quantize = \"int4\": the group along the input dim (--group-size; 0: default)"),
        "hf_model": attr.label_list(
            allow_files = True,
            mandatory = True,
            doc = "the model directory's files (save_pretrained: config.json, safetensors, tokenizer files)",
        ),
        "kv_dtype": attr.string(default = "fp32", values = ["fp32", "fp16"], doc = "the KV cache (--kv-dtype)"),
        "max_seq_len": attr.int(default = 128, doc = "the largest token count T (--max-seq-len)"),
        "quantize": attr.string(
            default = "none",
            values = ["none", "int8", "int8-row", "int4"],
            doc = "the foundation's weights (--quantize)",
        ),
        "_exporter": attr.label(
            default = Label("//tools:export_lora"),
            executable = True,
            cfg = "exec",
        ),
        # The pinned environment the exporter runs in: an input, so that new pins re-run exports.
        "_requirements": attr.label(
            default = Label("//third_party/python:requirements.lock"),
            allow_single_file = True,
        ),
    },
)

def _edgeshare_adapter_impl(ctx):
    foundation = ctx.attr.foundation[EdgeshareFoundationInfo]
    adapter_files = ctx.files.adapter
    adapter_dir = _directory_of(adapter_files, "adapter_config.json", "adapter", ctx.label)
    adapter_name = ctx.attr.adapter_name or ctx.label.name
    pte = ctx.actions.declare_file("%s/%s.pte" % (ctx.label.name, adapter_name))
    args = ctx.actions.args()
    args.add("--hf-model", foundation.model_dir)
    args.add("--adapter", "%s=%s" % (adapter_name, adapter_dir))
    args.add("--out", pte.dirname)
    args.add("--over-foundation", foundation.index)
    args.add_all(foundation.flags)
    ctx.actions.run(
        executable = ctx.attr._exporter[DefaultInfo].files_to_run,
        arguments = [args],
        # The foundation's index, not its .ptd: the action's inputs stay small, and a foundation
        # re-exported to the same bytes re-runs no adapter.
        inputs = depset(
            adapter_files + [foundation.index, ctx.file._requirements],
            transitive = [foundation.model_files],
        ),
        outputs = [pte],
        # The shell environment a genrule gets (PATH, for the py_binary's interpreter); with
        # --incompatible_strict_action_env a fixed one, the same on every machine.
        use_default_shell_env = True,
        mnemonic = "EdgeshareExportAdapter",
        progress_message = "Exporting adapter '%s' of %s" % (adapter_name, ctx.label),
    )
    return [DefaultInfo(
        files = depset([pte]),
        runfiles = ctx.runfiles(files = [pte, foundation.ptd]),
    )]

edgeshare_adapter = rule(
    implementation = _edgeshare_adapter_impl,
    doc = "One PEFT LoRA adapter's program (<name>/<adapter_name>.pte) over an edgeshare_foundation.",
    attrs = {
        "adapter": attr.label_list(
            allow_files = True,
            mandatory = True,
            doc = "the adapter directory's files (PEFT save_pretrained: adapter_config.json, adapter_model.safetensors)",
        ),
        "adapter_name": attr.string(doc = "the program's file stem (default: the target's name)"),
        "foundation": attr.label(
            mandatory = True,
            providers = [EdgeshareFoundationInfo],
            doc = "the edgeshare_foundation the program runs over",
        ),
        "_exporter": attr.label(
            default = Label("//tools:export_lora"),
            executable = True,
            cfg = "exec",
        ),
        # The pinned environment the exporter runs in: an input, so that new pins re-run exports.
        "_requirements": attr.label(
            default = Label("//third_party/python:requirements.lock"),
            allow_single_file = True,
        ),
    },
)

def edgeshare_adapters(name, foundation, adapters, **kwargs):
    """One edgeshare_adapter per entry of `adapters`, and a filegroup `name` of their programs.

        edgeshare_adapters(
            name = "programs",
            foundation = ":foundation",
            adapters = {"chat": "//adapters/chat:files", "code": "//adapters/code:files"},
        )
        # :chat (chat/chat.pte), :code (code/code.pte), :programs (both)

    Args:
      name: the filegroup of every program.
      foundation: the edgeshare_foundation they run over.
      adapters: a dict from adapter name (the target's name and the program's stem) to its files
        (a label, or a list of labels and files such as a glob).
      **kwargs: passed to every target (visibility, tags, testonly).
    """
    for adapter_name, files in adapters.items():
        edgeshare_adapter(
            name = adapter_name,
            adapter = files if type(files) == "list" else [files],
            foundation = foundation,
            **kwargs
        )
    native.filegroup(
        name = name,
        srcs = [":" + adapter_name for adapter_name in adapters],
        **kwargs
    )
