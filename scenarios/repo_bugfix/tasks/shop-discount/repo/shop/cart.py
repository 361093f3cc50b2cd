from .models import Item
from .pricing import apply_discount, shipping


class Cart:
    def __init__(self) -> None:
        self.items: list[Item] = []
        self.discount = 0.0

    def add(self, name: str, price: float, qty: int = 1) -> None:
        self.items.append(Item(name, price, qty))

    def total(self) -> float:
        goods = apply_discount(sum(i.subtotal for i in self.items), self.discount)
        return round(goods + shipping(goods), 2)
