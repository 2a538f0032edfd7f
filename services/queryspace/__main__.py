from services.platform import blas

blas.single_threaded()  # before NumPy loads: the local embedding model runs one pass per core

from services.queryspace.main import main  # noqa: E402

main()
