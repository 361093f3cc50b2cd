from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    qty: int = 1

    @property
    def subtotal(self) -> float:
        return self.price * self.qty
