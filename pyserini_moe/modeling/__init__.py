"""Retrieval models. Importing this package registers every model type, so that
:func:`~pyserini_moe.modeling.folder.load_model` can rebuild any saved folder by its type name.
"""

from pyserini_moe.modeling.base import Encoded, RetrievalModel, Side
from pyserini_moe.modeling.biencoder import DprBiEncoder, SiameseBiEncoder
from pyserini_moe.modeling.came import CameEncoder
from pyserini_moe.modeling.colbert import ColbertEncoder
from pyserini_moe.modeling.cotmote import CotMoteEncoder
from pyserini_moe.modeling.folder import load_model
from pyserini_moe.modeling.registry import model_types
from pyserini_moe.modeling.sbmoe import SbMoeEncoder
from pyserini_moe.modeling.splade import SpladeEncoder
from pyserini_moe.modeling.taser import TaserEncoder

__all__ = ["CameEncoder", "ColbertEncoder", "CotMoteEncoder", "DprBiEncoder", "Encoded",
           "RetrievalModel", "SbMoeEncoder", "Side", "SiameseBiEncoder", "SpladeEncoder",
           "TaserEncoder", "load_model", "model_types"]
