"""The catalogue of real data: where each archive lives and the checksums it is pinned to.

Data, not code: one :class:`~pdelab.data.pins.Source` per file, keyed by the name the data
modules ask for (``PINNED["imdb"]``), and one :class:`~pdelab.data.pins.DebPackage` per
Debian package that data is read from (``DEBIAN["dataset-fashion-mnist"]``). A stale or new
pin is an edit here and nowhere else; the comments say where each pin comes from.
"""

from __future__ import annotations

from pdelab.data.pins import DebPackage, Source

# Multi30K task 1 (Elliott et al. 2016), En-De, as the Fractional Neural Attention code reads
# it: torchtext's Multi30k with its URLs patched to a GitHub copy of the WMT16 archives
# (tanjeffreyz/pytorch-multi30k), here at that repository's commit 7c6ef4e so the bytes cannot
# change. training.tar.gz holds train.{de,en} (29,000 lines), validation.tar.gz val.{de,en}
# (1,014), mmt16_task1_test.tar.gz test.{de,en,fr} (1,000, the 2016 Flickr test set). The
# sha256s of training and validation are torchtext's own pins (its MD5 table holds sha256s);
# the test archive's is the one that code pins for this copy (torchtext pins another copy of
# the same test files). All three and the sizes were checked against the files themselves.
_MULTI30K = "https://raw.githubusercontent.com/tanjeffreyz/pytorch-multi30k/" + (
    "7c6ef4e24ce9a46ad897c91ddc5541ce7d1edf7f/"
)

PINNED: dict[str, Source] = {
    # The LRA release (~7.7 GB): a gzipped tar despite the ".gz" name, holding listops-1000,
    # the retrieval TSVs and the Pathfinder images. We know of no published sha256 for it and
    # could not download it to compute one, so it is deliberately unpinned: fetch needs
    # allow_unpinned=True and prints the digest, which should then be pinned here.
    "lra_release": Source(
        url="https://storage.googleapis.com/long-range-arena/lra_release.gz",
        sha256=None,
        filename="lra_release.gz",
    ),
    # IMDb (Maas et al. 2011), used by LRA's byte-level text classification task.
    "imdb": Source(
        url="https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
        filename="aclImdb_v1.tar.gz",
        size=84125825,
    ),
    # CIFAR-10 python pickles, used by LRA's grayscale sequential image task.
    "cifar10": Source(
        url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        sha256="6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
        filename="cifar-10-python.tar.gz",
        size=170498071,
    ),
    # The word-level text classification and language-modelling data of Continuous-Time
    # Attention. Only MD5s are published for these files (torchtext's own pins, checked in
    # pytorch/text: torchtext/datasets/ag_news.py, sst2.py and wikitext103.py); no sha256 is
    # known to us, so fetch prints it on the first download for pinning.
    # AG News (Zhang et al. 2015), the CSVs torchtext's AG_NEWS reads: "class(1-4)","title",
    # "description", 120,000 training and 7,600 test rows.
    "ag_news_train": Source(
        url="https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/ag_news_csv/"
        "train.csv",
        sha256=None,
        md5="b1a00f826fdfbd249f79597b59e1dc12",
        filename="ag_news_train.csv",
    ),
    "ag_news_test": Source(
        url="https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/ag_news_csv/"
        "test.csv",
        sha256=None,
        md5="d52ea96a97a2d943681189a97654912d",
        filename="ag_news_test.csv",
    ),
    # SST-2 as distributed by GLUE: SST-2/{train,dev,test}.tsv ("sentence\tlabel"; the test
    # split has no labels).
    "sst2": Source(
        url="https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
        sha256=None,
        md5="9f81648d4199384278b86e315dac217c",
        filename="SST-2.zip",
    ),
    # WikiText-103 (Merity et al. 2017), word level: wikitext-103/wiki.{train,valid,test}.tokens.
    "wikitext103": Source(
        url="https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip",
        sha256=None,
        md5="9ddaacaf6af0710eda8c456decff7832",
        filename="wikitext-103-v1.zip",
    ),
    "multi30k_train": Source(
        url=_MULTI30K + "training.tar.gz",
        sha256="20140d013d05dd9a72dfde46478663ba05737ce983f478f960c1123c6671be5e",
        filename="multi30k_training.tar.gz",
        size=1207136,
    ),
    "multi30k_val": Source(
        url=_MULTI30K + "validation.tar.gz",
        sha256="a7aa20e9ebd5ba5adce7909498b94410996040857154dab029851af3a866da8c",
        filename="multi30k_validation.tar.gz",
        size=46329,
    ),
    "multi30k_test": Source(
        url=_MULTI30K + "mmt16_task1_test.tar.gz",
        sha256="d914ec964e2c5f0534e5cdd3926cd2fe628d591dad9423c3ae953d93efdb27a6",
        filename="multi30k_mmt16_task1_test.tar.gz",
        size=66148,
    ),
}

# Debian bookworm packages (main), fetched with `apt-get download NAME=VERSION`; version, size
# and sha256 as `apt-cache show NAME=VERSION` lists them, checked against the downloaded files.
# All are Architecture: all, so one file (and pin) serves every machine.
DEBIAN: dict[str, DebPackage] = {
    # Fashion-MNIST (Xiao et al. 2017): 60,000 + 10,000 28x28 grayscale images of 10 classes
    # of clothing, as the upstream IDX files. The files are pinned too, so that an installed
    # copy (/usr/share/datasets/fashion-mnist) can be verified.
    "dataset-fashion-mnist": DebPackage(
        name="dataset-fashion-mnist",
        version="0.0~git20200523.55506a9-1",
        arch="all",
        sha256="39e172fe32dd318ebb3e512220c3beea2fa47d7e20bab348fb4e0922d6beefc0",
        size=30900652,
        files={
            "usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz": (
                "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"
            ),
            "usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz": (
                "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"
            ),
            "usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz": (
                "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"
            ),
            "usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz": (
                "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"
            ),
        },
    ),
    # German message catalogues (usr/share/locale/de/LC_MESSAGES/*.mo) of GNOME's toolkit and
    # desktop settings: gtk30 and gtk30-properties, gtk20 and gtk20-properties,
    # gsettings-desktop-schemas. They stand in for Multi30K (translation.py).
    "libgtk-3-common": DebPackage(
        name="libgtk-3-common",
        version="3.24.38-2~deb12u3",
        arch="all",
        sha256="f2642d127d85440acbfc2ed404d3932d8b2fbe8a576ead7f93f35ac1fa999c92",
        size=3895056,
    ),
    "libgtk2.0-common": DebPackage(
        name="libgtk2.0-common",
        version="2.24.33-2+deb12u1",
        arch="all",
        sha256="f55a9800d3721b1de246e4bfaf94a63ca50efdfa49eb5fa2362ed4fa79258299",
        size=2659900,
    ),
    "gsettings-desktop-schemas": DebPackage(
        name="gsettings-desktop-schemas",
        version="43.0-1",
        arch="all",
        sha256="15cc7142c3ddea0551b834c53c4d3b5cd8f5485e695100966877f2be50def7af",
        size=642864,
    ),
}
