if __name__ != "rlsys.learners":  # the top-level learners/ is a link to this folder: one name per file
    raise ImportError("import rlsys.learners, not learners: the top-level learners/ folder is a link into rlsys/")
