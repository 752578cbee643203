"""edgeshare_wheel: a pip-installable wheel of Python packages built in this repository.

    edgeshare_wheel(
        name = "wheel",
        deps = ["//extension/python"],            # py_library/py_binary targets: their sources and .so data
        requires = ["numpy"],                       # its range in `requirements`: numpy>=1.26.4,<3
        extras = {"export": ["torch", "peft"]},     # pip install 'edgeshare-...whl[export]'
        entry_points = {"edgeshare-generate": "edgeshare.extension.python.generate_cli:main"},
        requirements = "wheel_requirements.txt",    # NAME>=LOWEST,<BOUND lines
    )

Every .py file and shared library of this repository in the deps' sources and runfiles goes in at
edgeshare/<its path>, as Bazel's runfiles import it (edgeshare.extension.python, edgeshare.exir,
...); files of other repositories (the venv, Bazel's tools) never do. The wheel's file name carries
the Python and platform tags of the interpreter that builds it, which is the one the extension module
was compiled against (build_wheel.py checks it).
"""

def _wheel_impl(ctx):
    files = {}
    for dep in ctx.attr.deps:
        candidates = dep[PyInfo].transitive_sources.to_list() + dep[DefaultInfo].default_runfiles.files.to_list()
        for f in candidates:
            if f.owner.workspace_name != "" or f.short_path.startswith("../"):
                continue
            if not (f.basename.endswith(".py") or f.basename.endswith(".so")):
                continue
            if f.basename.endswith("_test.py"):
                continue
            files["edgeshare/" + f.short_path] = f
    manifest = ctx.actions.declare_file(ctx.label.name + ".manifest")
    ctx.actions.write(manifest, "".join(["%s\t%s\n" % (dest, files[dest].path) for dest in sorted(files)]))
    out = ctx.actions.declare_file("%s-%s-%s.whl" % (ctx.attr.distribution, ctx.attr.version, ctx.attr.tag))
    args = ctx.actions.args()
    args.add("--manifest", manifest)
    args.add("--out", out)
    args.add("--distribution", ctx.attr.distribution)
    args.add("--version", ctx.attr.version)
    args.add("--tag", ctx.attr.tag)
    args.add("--summary", ctx.attr.summary)
    args.add("--requirements", ctx.file.requirements)
    args.add_all(ctx.attr.requires, before_each = "--requires")
    for extra, names in ctx.attr.extras.items():
        for requirement in names:
            args.add("--extra", "%s:%s" % (extra, requirement))
    for script, target in ctx.attr.entry_points.items():
        args.add("--entry-point", "%s=%s" % (script, target))
    ctx.actions.run(
        executable = ctx.executable._builder,
        arguments = [args],
        inputs = [manifest, ctx.file.requirements] + files.values(),
        outputs = [out],
        mnemonic = "EdgeshareWheel",
        # The py_binary stub finds its interpreter on PATH, as in a genrule.
        use_default_shell_env = True,
        progress_message = "Writing the wheel %s" % out.short_path,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

edgeshare_wheel = rule(
    implementation = _wheel_impl,
    doc = "A wheel of this repository's Python packages and extension module (see the file's docstring).",
    attrs = {
        "deps": attr.label_list(providers = [PyInfo], doc = "py_library / py_binary targets to package"),
        "distribution": attr.string(default = "edgeshare", doc = "the distribution's name"),
        "entry_points": attr.string_dict(doc = "console script name -> 'module:function'"),
        "extras": attr.string_list_dict(doc = "extra -> the distribution names it pulls (ranges from requirements)"),
        "requirements": attr.label(allow_single_file = True, mandatory = True, doc = "NAME>=LOWEST,<BOUND lines"),
        "requires": attr.string_list(doc = "distribution names needed at run time (ranges from requirements)"),
        "summary": attr.string(doc = "one line for the package index"),
        "tag": attr.string(mandatory = True, doc = "python-abi-platform, e.g. cp311-cp311-linux_x86_64"),
        "version": attr.string(mandatory = True),
        "_builder": attr.label(
            default = Label("//extension/python:build_wheel"),
            executable = True,
            cfg = "exec",
        ),
    },
)
