if __name__ != "rlsys.actors":  # the top-level actors/ is a link to this folder: one name per file
    raise ImportError("import rlsys.actors, not actors: the top-level actors/ folder is a link into rlsys/")
