"""A repository made of files from this repo, for the offline stand-ins of @rules_cc and friends.

Bazel 4.2.3 would download @rules_cc, @rules_python and @remote_coverage_tools the first time a cc or
py target builds; offline, each is replaced by a few small files kept under //third_party.
"""

def _shim_repository_impl(rctx):
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)
    for label, dest in rctx.attr.files.items():
        rctx.symlink(rctx.path(label), dest)

shim_repository = repository_rule(
    implementation = _shim_repository_impl,
    attrs = {
        "files": attr.label_keyed_string_dict(
            allow_files = True,
            doc = "Each file of this repo and the path it takes in the new repository.",
        ),
    },
    doc = "Makes a repository whose files are symlinks to files of this repository.",
)
